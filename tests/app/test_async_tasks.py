"""Issue 24: async tasks run on the worker's event loop beside sync ones; a cancel or a
timeout cancels the coroutine."""

from __future__ import annotations

import asyncio
import contextlib
import time

import echomq
from tests.support.app_workers import Workers
from tests.support.waits import wait_until


def ended(app: echomq.App, queue: str, job_id: str, state: str) -> echomq.Job:
    return wait_until(lambda: (j := echomq.get_job(app.conn, queue, job_id)).state == state
                      and j, timeout=20)


def test_async_and_sync_tasks_run_side_by_side(app, names, workers: Workers) -> None:
    queue = names("q")

    @app.task(queue=queue, name="a.fetch")
    async def fetch(url: str) -> dict[str, object]:
        job = echomq.current_job()
        assert job is not None
        await job.aprogress(0.5)
        await job.alog(f"fetching {url}")
        await job.acheckpoint()
        await asyncio.sleep(0.01)
        return {"url": url, "task": job.name, "attempt": job.attempts}

    @app.task(queue=queue, name="a.parse")
    def parse(text: str) -> int:
        return len(text)

    fetched, parsed = fetch.enqueue("https://x"), parse.enqueue("hello")
    workers.start(app, [queue])
    row = ended(app, queue, fetched, "completed")
    assert row.result == {"url": "https://x", "task": "a.fetch", "attempt": 1}
    assert row.progress == 0.5 and [line.text for line in row.logs] == ["fetching https://x"]
    assert ended(app, queue, parsed, "completed").result == 5


def test_concurrency_counts_coroutines_on_the_loop(app, names, workers) -> None:
    queue = names("q")
    running, most = [0], [0]

    @app.task(queue=queue, name="a.wait")
    async def wait(n: int) -> int:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0.3)
        running[0] -= 1
        return n

    ids = wait.enqueue_many([(n,) for n in range(200)])
    sent = time.monotonic()
    worker = workers.start(app, [queue], concurrency=100)
    wait_until(lambda: echomq.counts(app.conn, queue).completed == 200, timeout=30)
    assert time.monotonic() - sent < 10  # 200 x 0.3 s one at a time would be 60 s
    assert most[0] >= 50, most  # coroutines ran at once, handed over by one thread
    assert worker.consumer.threads == 1
    assert echomq.get_job(app.conn, queue, ids[-1]).result == 199


def test_a_cancel_request_cancels_the_coroutine(app, names, workers) -> None:
    queue = names("q")
    started = []

    @app.task(queue=queue, name="a.long")
    async def long() -> str:
        started.append(1)
        await asyncio.sleep(30)
        return "never"

    job_id = long.enqueue()
    workers.start(app, [queue], cancel=True)
    wait_until(lambda: started)
    sent = time.monotonic()
    echomq.cancel.request(app.conn, queue, job_id, reason="user asked")
    row = ended(app, queue, job_id, "completed")
    assert row.cancel_reason == "user asked" and time.monotonic() - sent < 5


def test_an_async_task_stops_at_its_timeout_and_one_that_swallows_it_is_settled(
        app, names, workers) -> None:
    queue = names("q")

    @app.task(queue=queue, name="a.slow", max_attempts=1, timeout_s=0.3, timeout_grace_s=0.5)
    async def slow() -> None:
        await asyncio.sleep(30)

    @app.task(queue=queue, name="a.stubborn", max_attempts=1, timeout_s=0.3,
              timeout_grace_s=0.5)
    async def stubborn() -> str:
        for _ in range(100):
            with contextlib.suppress(asyncio.CancelledError):  # swallowed: it goes on
                await asyncio.sleep(0.1)
        return "late"

    slow_id, stubborn_id = slow.enqueue(), stubborn.enqueue()
    workers.start(app, [queue])
    assert ended(app, queue, slow_id, "dead").last_error == "timeout after 0.3 s (stopped)"
    row = ended(app, queue, stubborn_id, "dead")
    assert row.last_error == "timeout after 0.3 s (abandoned)"


def test_a_burst_of_slower_async_jobs_behind_a_deep_buffer_runs_each_once(
        app, names, workers) -> None:
    """The held-lease burst (tests/worker/test_held_leases.py) for async tasks: the burst
    waits in the buffer for several leases; the beat keeps them, none dies or runs twice."""
    queue = names("q")
    runs: dict[int, int] = {}

    @app.task(queue=queue, name="a.burst")
    async def burst(n: int, slow: bool) -> int:
        runs[n] = runs.get(n, 0) + 1
        if slow:
            await asyncio.sleep(0.15)
        return n

    burst.enqueue_many([(n, False) for n in range(400)])
    burst.enqueue_many([(n, True) for n in range(400, 440)])
    worker = workers.start(app, [queue], concurrency=1, lease_ms=1_500, recovery="stalled",
                           poll_ms=100, beat_ms=None)
    wait_until(lambda: echomq.counts(app.conn, queue).completed
               + echomq.counts(app.conn, queue).dead >= 440, timeout=60)
    time.sleep(1.6)  # one more lease: a lapsed job would be collected now
    counts = echomq.counts(app.conn, queue)
    assert (counts.dead, counts.completed, counts.pending, counts.active) == (0, 440, 0, 0)
    assert sorted(runs) == list(range(440)) and set(runs.values()) == {1}
    assert worker.processed == 440
