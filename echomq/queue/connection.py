"""Connections: a URL or the embedded default, and the executor choice.

A :class:`Connection` bundles a redis-py client (``decode_responses=True``) with
the executor that runs transitions (``"scripts"`` or ``"functions"``). Every
verb takes a connection explicitly, as RQ does.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import redis

from echomq.errors import ConnectionFailed, InvalidArgument
from echomq.queue.embedded import EmbeddedValkey

if TYPE_CHECKING:
    from echomq.queue.executors import Executor

ExecutorName = Literal["scripts", "functions"]
EXECUTORS: tuple[ExecutorName, ...] = ("scripts", "functions")
DEFAULT_PAYLOAD_LIMIT = 512 * 1024
EMBEDDED_DIR_ENV = "EMQ_DATA_DIR"

_embedded_lock = threading.Lock()
_embedded: dict[str, EmbeddedValkey] = {}


def embedded_server(data_dir: str | os.PathLike[str] | None = None) -> EmbeddedValkey:
    """The process's private Valkey for ``data_dir`` (started once, reused after)."""
    folder = data_dir or os.environ.get(EMBEDDED_DIR_ENV) or Path.cwd() / ".echomq" / "valkey"
    key = str(Path(folder).resolve())
    with _embedded_lock:
        server = _embedded.get(key)
        if server is None or not server.running():
            server = EmbeddedValkey(key).start()
            _embedded[key] = server
        return server


class Connection:
    """A client, an executor and the limits checked before the wire."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        url: str,
        executor: ExecutorName = "scripts",
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
    ) -> None:
        if executor not in EXECUTORS:
            raise InvalidArgument(f"executor must be one of {EXECUTORS}, got {executor!r}")
        if isinstance(payload_limit, bool) or not isinstance(payload_limit, int) or (
            payload_limit <= 0
        ):
            raise InvalidArgument("payload_limit must be a positive integer")
        self.redis = client
        self.url = url
        self.executor_name: ExecutorName = executor
        self.payload_limit = payload_limit
        self._executor: Executor | None = None

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            from echomq.queue.executors import make_executor

            self._executor = make_executor(self)
        return self._executor

    def with_executor(self, executor: ExecutorName) -> Connection:
        """The same server and pool, another executor."""
        return Connection(
            self.redis, url=self.url, executor=executor, payload_limit=self.payload_limit
        )

    def close(self) -> None:
        self.redis.close()

    def __repr__(self) -> str:
        return f"Connection({self.url!r}, executor={self.executor_name!r})"


def connect(
    url: str | None = None,
    executor: ExecutorName = "scripts",
    *,
    data_dir: str | os.PathLike[str] | None = None,
    payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
    check: bool = True,
) -> Connection:
    """Connect to ``url`` (``redis://``, ``rediss://``, ``unix://``) or, with none,
    to a private embedded Valkey whose data lives in ``data_dir`` (default
    ``$EMQ_DATA_DIR`` or ``./.echomq/valkey``).

    With ``check`` (the default) the server is pinged at once, so a wrong URL
    fails here with :class:`ConnectionFailed` naming it, not at the first verb.
    """
    if executor not in EXECUTORS:
        raise InvalidArgument(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if url is None:
        url = embedded_server(data_dir).url
    try:
        client = redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)
    except ValueError as exc:
        raise ConnectionFailed(f"cannot use Redis URL {url!r}: {exc}") from exc
    conn = Connection(client, url=url, executor=executor, payload_limit=payload_limit)
    if check:
        try:
            client.ping()
        except redis.ConnectionError as exc:
            client.close()
            raise ConnectionFailed(f"cannot reach Redis/Valkey at {url}: {exc}") from exc
    return conn
