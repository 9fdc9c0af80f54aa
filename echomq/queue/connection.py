"""Connections: a URL or the embedded default, and the executor choice.

A :class:`Connection` bundles a redis-py client (``decode_responses=True``) with
the executor that runs transitions (``"scripts"`` or ``"functions"``). Every
verb takes a connection explicitly, as RQ does. A URL is only ever shown
through :func:`redact_url`: its password never reaches a message, a log or a repr.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Literal

import redis

from echomq.errors import ConnectionFailed, InvalidArgument
from echomq.queue.keys import (
    PREFIX,
    Keys,
    check_prefix,
    cron_set,
    declared_set,
    retained_set,
)
from echomq.servers.shared import SharedValkey
from echomq.servers.valkey import DATA_DIR_ENV

if TYPE_CHECKING:
    from echomq.queue.executors import Executor

ExecutorName = Literal["scripts", "functions"]
EXECUTORS: tuple[ExecutorName, ...] = ("scripts", "functions")
DEFAULT_PAYLOAD_LIMIT = 512 * 1024
EMBEDDED_DIR_ENV = DATA_DIR_ENV
_SECRET_PARAM = re.compile(r"([?&;]password=)[^&;#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` fit to print: ``user:password@`` becomes ``user:***@`` and a
    ``password=`` query parameter ``password=***``; everything else is kept.

    It errs on the side of hiding: an unencoded ``@`` or ``/`` inside a password
    still ends up behind the ``***``.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _SECRET_PARAM.sub(r"\1***", url)
    rest = _SECRET_PARAM.sub(r"\1***", rest)
    userinfo, at, hostpart = rest.rpartition("@")
    if at:
        user, colon, _secret = userinfo.partition(":")
        if colon:
            rest = f"{user}:***@{hostpart}"
    return f"{scheme}://{rest}"


class Connection:
    """A client, an executor and the limits checked before the wire."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        url: str,
        executor: ExecutorName = "scripts",
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        prefix: str = PREFIX,
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
        self.prefix = check_prefix(prefix)
        self.declared_set = declared_set(prefix)
        self.retained_set = retained_set(prefix)
        self.cron_set = cron_set(prefix)
        self._executor: Executor | None = None
        self._keys: dict[str, Keys] = {}

    def keys(self, queue: str) -> Keys:
        """The key names of ``queue`` under this connection's prefix (checked, cached)."""
        found = self._keys.get(queue)
        if found is None:
            found = Keys(queue, self.prefix)
            if len(self._keys) < 10_000:
                self._keys[queue] = found
        return found

    @property
    def executor(self) -> Executor:
        if self._executor is None:
            from echomq.queue.executors import make_executor

            self._executor = make_executor(self)
        return self._executor

    def with_executor(self, executor: ExecutorName) -> Connection:
        """The same server and pool, another executor."""
        return Connection(
            self.redis, url=self.url, executor=executor, payload_limit=self.payload_limit,
            prefix=self.prefix,
        )

    def close(self) -> None:
        self.redis.close()

    @property
    def safe_url(self) -> str:
        """The URL with its credentials redacted: the one to print or log."""
        return redact_url(self.url)

    def __repr__(self) -> str:
        return (f"Connection({self.safe_url!r}, executor={self.executor_name!r}, "
                f"prefix={self.prefix!r})")


def connect(
    url: str | None = None,
    executor: ExecutorName = "scripts",
    *,
    data_dir: str | os.PathLike[str] | None = None,
    payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
    check: bool = True,
    prefix: str = PREFIX,
) -> Connection:
    """Connect to ``url`` (``redis://``, ``rediss://``, ``unix://``) or, with none,
    to the embedded Valkey of ``data_dir`` (default ``$EMQ_DATA_DIR`` or
    ``./.echomq/valkey``).

    The embedded default is the folder's one *shared*, persistent server, the same
    one ``emq`` commands without ``--url`` use: the first user starts it (AOF,
    ``appendfsync everysec``) and it keeps running after this process exits, so an
    app and a worker on one machine see the same queue. Stop it with
    ``emq server stop``. For a private server that dies with its owner, start an
    :class:`~echomq.queue.embedded.EmbeddedValkey` and pass its ``url``.

    TLS options ride on the URL as redis-py reads them, e.g.
    ``rediss://host:6380/0?ssl_ca_certs=/path/ca.pem``. With ``check`` (the
    default) the server is pinged at once, so a wrong URL fails here with
    :class:`ConnectionFailed` naming it (credentials redacted), not at the first verb.

    Every key the library writes starts with ``prefix`` (default ``emq``): queues,
    rows, the declared set and the archive's leases. Two prefixes on one server are
    two separate deployments, e.g. one per tenant, each behind its own ACL
    (``~tenant-a:*``).
    """
    check_prefix(prefix)
    if executor not in EXECUTORS:
        raise InvalidArgument(f"executor must be one of {EXECUTORS}, got {executor!r}")
    if url is None:
        url = SharedValkey(data_dir).ensure().url
    try:
        client = redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)
    except ValueError as exc:
        raise ConnectionFailed(f"cannot use Redis URL {redact_url(url)!r}: {exc}") from exc
    conn = Connection(client, url=url, executor=executor, payload_limit=payload_limit,
                      prefix=prefix)
    if check:
        try:
            client.ping()
        except redis.ConnectionError as exc:
            client.close()
            raise ConnectionFailed(
                f"cannot reach Redis/Valkey at {redact_url(url)}: {exc}"
            ) from exc
    return conn
