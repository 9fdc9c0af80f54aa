"""Issue 24: ``aio.wait`` racing the settle, and ``aio.events`` riding a dropped
subscription (the server closes it: ``CLIENT KILL TYPE pubsub``)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import echomq
from echomq import aio
from echomq.queue.connection import Connection
from tests.aio.conftest import Runner
from tests.support.consumers import ConsumerThreads

QUICK = {"poll_ms": 20, "beat_ms": 50, "backoff_ms": 1, "backoff_cap_ms": 1}


def kill_subscribers(conn: Connection) -> int:
    """Close every pub/sub client of the server (of every node of a Cluster)."""
    if conn.cluster:
        client: Any = conn.redis
        return sum(int(client.client_kill_filter(_type="pubsub", target_nodes=node))
                   for node in client.get_nodes())
    return int(conn.redis.client_kill_filter(_type="pubsub"))


def test_wait_hears_jobs_a_sync_consumer_settles_meanwhile(conn: Connection, arun: Runner,
                                                           queue: str) -> None:
    ids = echomq.add_many(conn, queue, list(range(40)))
    threads = ConsumerThreads(conn, queue, **QUICK)
    release = threading.Event()

    def handler(job: Any) -> Any:
        release.wait(10)
        time.sleep(0.001 * (job.payload % 7))  # settles spread over the waits' subscriptions
        return job.payload * 2

    async def body(aconn: aio.AsyncConnection) -> list[echomq.Job]:
        waits = [asyncio.ensure_future(aio.wait(aconn, queue, i, timeout_s=30)) for i in ids]
        await asyncio.sleep(0)  # the waits start subscribing; the handlers are let go
        release.set()
        return await asyncio.gather(*waits)

    threads.start(handler, concurrency=8)
    try:
        jobs = arun(body)
    finally:
        release.set()
        threads.stop_all()
    assert [job.id for job in jobs] == ids
    assert {job.state for job in jobs} == {"completed"}
    assert [echomq.get_job(conn, queue, i).raw["result"] for i in ids] == [
        job.raw["result"] for job in jobs]


def test_events_keep_coming_after_the_subscription_is_killed(conn: Connection, arun: Runner,
                                                             queue: str) -> None:
    async def body(aconn: aio.AsyncConnection) -> tuple[list[str], int]:
        heard: list[str] = []
        async with aio.events(aconn, queue, timeout_s=30) as stream:
            await asyncio.to_thread(echomq.pause, conn, queue)
            heard.append((await stream.__anext__()).event)
            killed = await asyncio.to_thread(kill_subscribers, conn)
            # what is published while it subscribes again is lost: publish until heard
            ticking = asyncio.ensure_future(_toggle(conn, queue))
            try:
                async for event in stream:
                    heard.append(event.event)
                    if len(heard) >= 4:
                        break
            finally:
                ticking.cancel()
        return heard, killed

    heard, killed = arun(body)
    assert killed >= 1
    assert heard[0] == "paused"
    assert len(heard) == 4 and set(heard[1:]) <= {"paused", "resumed", "added"}


async def _toggle(conn: Connection, queue: str) -> None:
    while True:
        await asyncio.to_thread(echomq.resume, conn, queue)
        await asyncio.sleep(0.05)
        await asyncio.to_thread(echomq.pause, conn, queue)
        await asyncio.sleep(0.05)


def test_wait_reads_the_row_again_after_its_subscription_is_killed(
        conn: Connection, arun: Runner, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})

    async def body(aconn: aio.AsyncConnection) -> echomq.Job:
        waiting = asyncio.ensure_future(aio.wait(aconn, queue, job_id, timeout_s=30))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        assert await asyncio.to_thread(kill_subscribers, conn) >= 1
        # settled at once: its news may fall in the gap before the subscription is back
        [held] = await asyncio.to_thread(echomq.claim, conn, queue, lease_ms=60_000)
        await asyncio.to_thread(echomq.complete, conn, queue, held.id, held.token, "done")
        return await waiting

    job = arun(body)
    assert job.state == "completed"


def test_an_events_stream_ends_by_count_timeout_and_aclose(conn: Connection, arun: Runner,
                                                           queue: str) -> None:
    async def body(aconn: aio.AsyncConnection) -> tuple[list[str], list[str], bool]:
        stream = await aio.events(aconn, queue, count=2).open()
        for _ in range(3):
            await asyncio.to_thread(echomq.pause, conn, queue)
            await asyncio.to_thread(echomq.resume, conn, queue)
        counted = [event.event async for event in stream]
        started = time.monotonic()
        timed = [event.event async for event in aio.events(aconn, queue, timeout_s=0.3)]
        assert time.monotonic() - started < 5
        closing = await aio.events(aconn, queue).open()
        await closing.aclose()
        return counted, timed, closing.closed and stream.closed

    counted, timed, closed = arun(body)
    assert counted == ["paused", "resumed"] and timed == [] and closed


def test_many_waits_share_one_subscription(conn: Connection, arun: Runner,
                                           queue: str) -> None:
    """More waits at once than the client's pool has connections (100; a Cluster
    client's pools refuse past it rather than wait): one subscription serves them all,
    and the waits end when their jobs do."""
    ids = echomq.add_many(conn, queue, list(range(60 if conn.cluster else 300)))

    async def body(aconn: aio.AsyncConnection) -> tuple[list[echomq.Job], int]:
        waits = [asyncio.ensure_future(aio.wait(aconn, queue, i, timeout_s=60)) for i in ids]
        while len(aconn.hubs._hubs.get(queue, _NoHub()).inboxes) < len(ids):
            await asyncio.sleep(0.01)
        subscribed = _subscribers(conn)
        threads = ConsumerThreads(conn, queue, **QUICK)
        threads.start(lambda job: job.payload, concurrency=16)
        try:
            return await asyncio.gather(*waits), subscribed
        finally:
            await asyncio.to_thread(threads.stop_all)

    jobs, subscribed = arun(body)
    assert [job.state for job in jobs] == ["completed"] * len(ids)
    assert subscribed == 1


class _NoHub:
    inboxes: dict[str, Any] = {}


def _subscribers(conn: Connection) -> int:
    """How many pub/sub clients the server (every node of a Cluster) has."""
    client: Any = conn.redis
    nodes = client.get_nodes() if conn.cluster else [None]
    total = 0
    for node in nodes:
        listing = (client.client_list(target_nodes=node) if node is not None
                   else client.client_list())
        total += sum(1 for c in listing if "P" in c.get("flags", ""))
    return total
