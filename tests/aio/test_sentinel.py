"""Issue 24: ``aio.connect`` by a Sentinel URL reaches the primary the sentinels name,
and follows it after a failover (every new connection asks a sentinel)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import echomq
from echomq import aio
from echomq.servers.sentinel import LocalSentinel
from echomq.servers.valkey import EmbeddedValkey
from tests.support.servers import memory_folder


@pytest.fixture(scope="module")
def sentinel() -> Iterator[LocalSentinel]:
    with memory_folder("emq-sentinel-") as folder, LocalSentinel(folder) as found:
        yield found


def _rows_on(server: EmbeddedValkey, queue: str) -> int:
    admin = redis.Redis(host=server.host, port=server.port, decode_responses=True)
    try:
        return sum(1 for _ in admin.scan_iter(match=f"emq:{{{queue}}}:job:*"))
    finally:
        admin.close()


@pytest.mark.parametrize("executor", ["scripts", "functions"])
def test_aio_by_a_sentinel_url_gives_the_sync_rows(sentinel: LocalSentinel,
                                                   executor: str) -> None:
    queue = f"asent-{uuid.uuid4().hex[:8]}"
    conn = echomq.connect(sentinel.url, executor)  # type: ignore[arg-type]

    async def body() -> tuple[list[str], echomq.Job | None, str]:
        async with await aio.connect(sentinel.url, executor=executor) as aconn:  # type: ignore[arg-type]
            assert "***" in repr(aconn) or "@" not in aconn.url
            ids = await aio.add_many(aconn, queue, [{"n": 1}, {"n": 2}])
            ids.append(await aio.add(aconn, queue, {"n": 3}, job_id="third", priority=2))
            held = await asyncio.to_thread(echomq.claim, conn, queue, 60_000)
            await asyncio.to_thread(echomq.complete, conn, queue, held[0].id, held[0].token)
            done = await aio.wait(aconn, queue, held[0].id, timeout_s=10)
            cancelled = await aio.cancel_request(aconn, queue, "third", reason="stop")
            return ids, done, cancelled

    try:
        ids, done, cancelled = asyncio.run(body())
        assert ids[2] == "third" and done is not None and done.state == "completed"
        assert cancelled == "removed"
        primary = sentinel.primary()
        assert primary is not None
        assert _rows_on(primary, queue) == 2  # the writes went to the named primary
        assert echomq.counts(conn, queue).pending == 1
    finally:
        conn.close()


def test_aio_follows_a_sentinel_failover() -> None:
    with memory_folder("emq-sentinel-") as folder, LocalSentinel(folder) as local:
        old, replica = local.primary(), local.replica()
        assert old is not None and replica is not None
        queue = f"afail-{uuid.uuid4().hex[:8]}"

        async def body() -> list[str]:
            async with await aio.connect(local.url) as aconn:
                before = await aio.add(aconn, queue, {"n": 1}, job_id="before")
                await asyncio.to_thread(old.kill)
                await asyncio.to_thread(local.wait_promoted, replica)
                for _ in range(100):  # the pool's old connections fail once each
                    try:
                        after = await aio.add(aconn, queue, {"n": 2}, job_id="after")
                        break
                    except echomq.ConnectionFailed:
                        await asyncio.sleep(0.1)
                else:
                    raise AssertionError("no add reached the promoted replica")
                return [before, after]

        assert asyncio.run(body()) == ["before", "after"]
        assert _rows_on(replica, queue) >= 1


def test_rediss_sentinel_speaks_tls_to_the_sentinels_and_the_primary() -> None:
    from redis.asyncio.connection import SSLConnection
    from redis.asyncio.sentinel import SentinelManagedSSLConnection

    async def body() -> None:
        aconn = await aio.connect("rediss+sentinel://127.0.0.1:1,127.0.0.1:2/svc/2"
                                  "?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required",
                                  check=False)
        try:
            pool: Any = aconn.redis.connection_pool
            assert pool.connection_class is SentinelManagedSSLConnection
            assert pool.connection_kwargs["db"] == 2
            assert pool.connection_kwargs["ssl_ca_certs"] == "/etc/ca.pem"
            for client in aconn._watchers.sentinels:
                assert client.connection_pool.connection_class is SSLConnection
        finally:
            await aconn.close()

    asyncio.run(body())
