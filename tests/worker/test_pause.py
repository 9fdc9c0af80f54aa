"""A paused queue with Consumers running, on both executors: nothing is claimed, held
jobs settle, and a resume wakes the Consumers at once (their poll is far longer than
the test waits)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import echomq
from echomq.queue.connection import Connection
from tests.support.consumers import ConsumerThreads
from tests.support.waits import wait_until

LONG_POLL_MS = 60_000
"""Longer than any wait below: a Consumer that claims in time was woken, not polling."""


@pytest.fixture
def start(conn: Connection, queue: str) -> Iterator[Callable[..., echomq.Consumer]]:
    """Run Consumers on background threads; stop them all at the end of the test."""
    threads = ConsumerThreads(conn, queue, poll_ms=LONG_POLL_MS)
    yield threads.start
    threads.stop_all()


def test_a_paused_queue_feeds_no_consumer_until_resumed(
    conn: Connection, queue: str, start: Callable[..., echomq.Consumer]
) -> None:
    gate = threading.Event()
    ran: list[int] = []

    def handler(job: Any) -> int:
        if job.payload["n"] == 0:
            assert gate.wait(10)
        ran.append(job.payload["n"])
        return int(job.payload["n"])

    first = echomq.add(conn, queue, {"n": 0})
    start(handler, concurrency=2)
    wait_until(lambda: echomq.counts(conn, queue).active == 1)
    echomq.pause(conn, queue)
    added = echomq.add_many(conn, queue, [{"n": i} for i in range(1, 6)])  # add still works
    start(handler, concurrency=2)  # a Consumer that starts while paused claims nothing too
    gate.set()  # the held job runs on and settles
    wait_until(lambda: echomq.get_job(conn, queue, first).state == "completed")  # type: ignore[union-attr]
    time.sleep(1.0)  # a while: both Consumers are idle, woken by the adds, and claim nothing
    counts = echomq.counts(conn, queue)
    assert (counts.pending, counts.active, counts.completed, counts.paused) == (5, 0, 1, True)
    assert ran == [0]

    echomq.resume(conn, queue)
    wait_until(lambda: echomq.counts(conn, queue).completed == 6)
    assert sorted(ran) == list(range(6))
    assert all(echomq.get_job(conn, queue, i).state == "completed"  # type: ignore[union-attr]
               for i in added)


def test_retry_dead_and_promote_wake_an_idle_consumer(
    conn: Connection, queue: str, start: Callable[..., echomq.Consumer]
) -> None:
    dead = echomq.add(conn, queue, {"n": 1}, max_attempts=1)
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    echomq.fail(conn, queue, dead, held.token, "boom")
    later = echomq.add(conn, queue, {"n": 2}, delay_ms=LONG_POLL_MS * 2)
    start(lambda job: job.payload["n"])
    time.sleep(0.3)  # the Consumer parks: nothing pending, the delayed job is far off
    assert echomq.retry_dead(conn, queue) == 1
    wait_until(lambda: echomq.get_job(conn, queue, dead).state == "completed")  # type: ignore[union-attr]
    echomq.promote(conn, queue, later)
    wait_until(lambda: echomq.get_job(conn, queue, later).state == "completed")  # type: ignore[union-attr]
    assert echomq.get_job(conn, queue, dead).retried == 1  # type: ignore[union-attr]
