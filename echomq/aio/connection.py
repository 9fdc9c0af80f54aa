"""``aio.connect`` and the asyncio connection: a ``redis.asyncio`` client, the executor
choice and the limits checked before the wire, as :class:`echomq.queue.connection.Connection`.

The URL forms are the sync ones (plain, ``rediss://`` with the TLS options redis-py reads,
``unix://``, Sentinel, a Cluster found by ``INFO cluster``), read by the same checks
(:func:`~echomq.queue.connection.check_numbers`, ``check_options``, the Sentinel parser)
and shown only redacted. No URL: the folder's shared server, found in a thread
(``asyncio.to_thread``) since starting it blocks.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import redis
import redis.asyncio

from echomq.aio.batch import AddBatch
from echomq.aio.cluster import AsyncEchoCluster
from echomq.aio.executors import AsyncExecutor, make_executor
from echomq.aio.hub import Hubs
from echomq.errors import ConnectionFailed, InvalidArgument
from echomq.queue.connection import (
    DEFAULT_PAYLOAD_LIMIT,
    ExecutorName,
    check_choices,
    check_numbers,
    check_options,
    check_settings,
    is_sentinel_url,
    redact_url,
)
from echomq.queue.keys import PREFIX, Keys, KeysCache, check_prefix
from echomq.queue.sentinel import sentinel_options


class AsyncConnection:
    """An asyncio client, an executor and the limits checked before the wire.

    Bound to the event loop it was opened on (``redis.asyncio``'s rule); ``await
    conn.close()`` when done, or ``async with``."""

    def __init__(self, client: Any, *, url: str, executor: ExecutorName = "scripts",
                 payload_limit: int = DEFAULT_PAYLOAD_LIMIT, prefix: str = PREFIX,
                 cluster: bool = False, watchers: Any = None) -> None:
        check_settings(executor, payload_limit)
        self.redis = client
        self.cluster = cluster
        self.url = url
        self.executor_name: ExecutorName = executor
        self.payload_limit = payload_limit
        self.prefix = check_prefix(prefix)
        self._watchers = watchers
        self._executor: AsyncExecutor | None = None
        self._keys = KeysCache(self.prefix)
        self.adds = AddBatch(self)
        """This turn's adds, sent together (:mod:`echomq.aio.batch`)."""
        self.hubs = Hubs()
        """The shared subscriptions of this connection's waits (:mod:`echomq.aio.hub`)."""

    def keys(self, queue: str) -> Keys:
        """The key names of ``queue`` under this connection's prefix (checked, cached)."""
        return self._keys(queue)

    @property
    def executor(self) -> AsyncExecutor:
        if self._executor is None:
            self._executor = make_executor(self.redis, self.url, self.executor_name,
                                           cluster=self.cluster)
        return self._executor

    async def close(self) -> None:
        """Close the client's connections (and a Sentinel URL's sentinel clients)."""
        try:
            await self.hubs.close()
            await self.redis.aclose()
        finally:
            if self._watchers is not None:
                await self._watchers.aclose()

    async def __aenter__(self) -> AsyncConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def safe_url(self) -> str:
        """The URL with its credentials redacted: the one to print or log."""
        return redact_url(self.url)

    def __repr__(self) -> str:
        return (f"AsyncConnection({self.safe_url!r}, executor={self.executor_name!r}, "
                f"prefix={self.prefix!r})")


async def connect(url: str | None = None, *, prefix: str = PREFIX,
                  executor: ExecutorName = "scripts",
                  data_dir: str | os.PathLike[str] | None = None,
                  payload_limit: int = DEFAULT_PAYLOAD_LIMIT, check: bool = True,
                  cluster: bool | None = None) -> AsyncConnection:
    """An asyncio connection to ``url`` or, with none, to the folder's shared server (the
    one ``echomq.connect()`` and ``emq`` use; found or started in a thread).

    Everything else is :func:`echomq.connect`'s: TLS options on the URL, a Cluster found
    on its own (``cluster=`` to force), Sentinel URLs, ``check`` pinging at once so a
    wrong URL fails here with ``ConnectionFailed`` (credentials redacted)."""
    check_choices(executor, prefix)  # refused before a server is reached or started
    if url is None:
        url = await asyncio.to_thread(_shared_url, data_dir)
    if not isinstance(url, str):
        raise InvalidArgument(f"aio.connect needs a URL or None, got {url!r}")
    options: dict[str, Any] = {"executor": executor, "payload_limit": payload_limit,
                               "prefix": prefix}
    if is_sentinel_url(url):
        if cluster:
            raise InvalidArgument("a Sentinel URL names one primary, not a Cluster")
        target, sentinel_kwargs, primary = sentinel_options(url)
        watchers = redis.asyncio.Sentinel(  # type: ignore[no-untyped-call]
            list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
        client = watchers.master_for(target.service, **primary)
        conn = AsyncConnection(client, url=url, watchers=watchers, **options)
        if check:
            await _ping(conn, f"cannot reach the primary through {redact_url(url)}")
        return conn
    check_numbers(url)
    try:
        # a blocking pool: a burst of coroutines past max_connections (100, or the URL's
        # ?max_connections=) waits for a free connection instead of failing
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url, decode_responses=True, health_check_interval=30)
        client = redis.asyncio.Redis.from_pool(pool)  # closed with the client
    except ValueError as exc:
        raise ConnectionFailed(f"cannot use Redis URL {redact_url(url)!r}: {exc}") from exc
    try:
        check_options(client.connection_pool, url)
        if cluster is None:
            cluster = check and await _says_cluster(client, url)
    except BaseException:
        await client.aclose()
        raise
    if cluster:
        await client.aclose()
        client = _cluster_client(url)
    conn = AsyncConnection(client, url=url, cluster=cluster, **options)
    if check:
        await _ping(conn, f"cannot reach Redis/Valkey at {redact_url(url)}")
    return conn


def _shared_url(data_dir: str | os.PathLike[str] | None) -> str:
    from echomq.servers.shared import SharedValkey

    return SharedValkey(data_dir).ensure().url


async def _ping(conn: AsyncConnection, failure: str) -> None:
    try:
        await conn.redis.ping()
    except (redis.ConnectionError, redis.exceptions.RedisClusterException) as exc:
        await conn.close()
        raise ConnectionFailed(f"{failure}: {exc}") from exc


async def _says_cluster(client: Any, url: str) -> bool:
    """True when the server at ``url`` is a Cluster node (``cluster_enabled:1``)."""
    try:
        info = await client.info("cluster")
    except redis.ConnectionError as exc:
        raise ConnectionFailed(
            f"cannot reach Redis/Valkey at {redact_url(url)}: {exc}") from exc
    except redis.ResponseError:
        return False  # INFO refused (an ACL without it): a plain server is the safe guess
    return bool(int(info.get("cluster_enabled", 0)))


def _cluster_client(url: str) -> Any:
    try:
        return AsyncEchoCluster.from_url(url, decode_responses=True, health_check_interval=30)
    except (ValueError, redis.exceptions.RedisClusterException) as exc:
        raise ConnectionFailed(f"cannot use Redis Cluster URL {redact_url(url)!r}: {exc}"
                               ) from exc
