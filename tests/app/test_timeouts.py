"""Issue 23: timeouts in thread slots. At ``timeout_s`` the token fires (a cooperative task
stops); at timeout plus grace a run still going is settled as failed without its thread."""

from __future__ import annotations

import threading
import time

import pytest

import echomq
from tests.support.app_workers import Workers
from tests.support.waits import wait_until


def finished(app: echomq.App, queue: str, job_id: str, state: str = "dead") -> echomq.Job:
    return wait_until(lambda: (j := echomq.get_job(app.conn, queue, job_id)).state == state
                      and j, timeout=20)


def test_a_task_stuck_in_c_ends_at_its_timeout_plus_grace_and_its_slot_is_given_back(
        app, names, workers: Workers) -> None:
    queue = names("q")
    release = threading.Event()

    @app.task(queue=queue, name="t.stuck", max_attempts=1, timeout_s=0.4, timeout_grace_s=0.3)
    def stuck() -> None:
        release.wait(3600)  # blocked in C, deaf to its token

    @app.task(queue=queue, name="t.quick")
    def quick() -> str:
        return "done"

    stuck_id = stuck.enqueue()
    sent = time.monotonic()
    worker = workers.start(app, [queue], concurrency=1)
    row = finished(app, queue, stuck_id)
    took = time.monotonic() - sent
    assert 0.7 <= took < 5, took
    assert row.last_error == "timeout after 0.4 s (abandoned)"
    quick_id = quick.enqueue()  # the one slot was given to a new thread
    assert finished(app, queue, quick_id, "completed").result == "done"
    assert worker.consumer.abandoned == 1 and worker.consumer.timeouts == 1
    release.set()  # the abandoned thread returns; its outcome is dropped
    time.sleep(0.2)
    assert echomq.get_job(app.conn, queue, stuck_id).state == "dead"


def test_a_cooperative_task_stops_at_its_soft_timeout_and_retries(app, names, workers) -> None:
    queue = names("q")
    runs: list[float] = []

    @app.task(queue=queue, name="t.coop", max_attempts=2, timeout_s=0.3, timeout_grace_s=10,
              backoff=echomq.Fixed(1))
    def coop() -> None:
        job = echomq.current_job()
        assert job is not None
        started = time.monotonic()
        try:
            while True:
                echomq.cancel.check_or_raise(job.cancel_token)
                time.sleep(0.01)
        finally:
            runs.append(time.monotonic() - started)

    job_id = coop.enqueue()
    workers.start(app, [queue])
    row = finished(app, queue, job_id)
    assert len(runs) == 2 and all(0.25 <= r < 2 for r in runs), runs  # never the grace
    assert row.last_error == "timeout after 0.3 s (stopped)"


def test_the_timeout_counts_the_run_not_the_wait_in_the_buffer(app, names, workers) -> None:
    queue = names("q")

    @app.task(queue=queue, name="t.steady", timeout_s=0.6, timeout_grace_s=0.2)
    def steady(n: int) -> int:
        time.sleep(0.35)
        return n

    ids = steady.enqueue_many([(n,) for n in range(4)])
    workers.start(app, [queue], concurrency=1, prefetch=4)  # each waits up to 1 s buffered
    for n, job_id in enumerate(ids):
        assert finished(app, queue, job_id, "completed").result == n


def test_a_running_job_with_a_timeout_keeps_its_lease(app, names, workers) -> None:
    queue = names("q")

    @app.task(queue=queue, name="t.long", timeout_s=5, timeout_grace_s=0.5)
    def long() -> str:
        time.sleep(2.0)  # four leases long, no checkpoint
        return "once"

    job_id = long.enqueue()
    workers.start(app, [queue], lease_ms=600, beat_ms=150)
    row = finished(app, queue, job_id, "completed")
    assert (row.result, row.attempts) == ("once", 1)  # never reaped and run twice


def test_a_per_job_timeout_overrides_the_tasks(app, names, workers) -> None:
    queue = names("q")

    @app.task(queue=queue, name="t.slow", max_attempts=1, timeout_s=60, timeout_grace_s=0.2)
    def slow() -> None:
        time.sleep(30)

    job_id = slow.enqueue_with(timeout_s=0.3)
    workers.start(app, [queue])
    assert "timeout after 0.3 s (abandoned)" in finished(app, queue, job_id).last_error


def test_past_max_abandoned_the_worker_stops_and_says_why(app, names) -> None:
    queue = names("q")
    release = threading.Event()

    @app.task(queue=queue, name="t.hang", max_attempts=1, timeout_s=0.2, timeout_grace_s=0.1)
    def hang(n: int) -> None:
        release.wait(3600)

    hang.enqueue_many([(n,) for n in range(3)])
    worker = app.worker([queue], concurrency=3, max_abandoned=1, poll_ms=20)
    try:
        with pytest.raises(echomq.ConsumerCrashed, match="more than max_abandoned=1"):
            worker.run(install_signals=False)
    finally:
        release.set()


@pytest.mark.parametrize("options, message", [
    ({"timeout_s": 0}, "timeout_s must be above 0"),
    ({"timeout_s": -1}, "timeout_s must be above 0"),
    ({"timeout_s": "30"}, "timeout_s must be a number"),
    ({"timeout_s": 1, "timeout_grace_s": -1}, "timeout_grace_s must be at least 0"),
])
def test_bad_timeouts_are_refused(app, options, message) -> None:
    with pytest.raises(echomq.InvalidArgument, match=message):
        app.task(**options)(print)


def test_a_grace_longer_than_the_lease_is_refused_naming_the_task(app, names) -> None:
    @app.task(queue=names("q"), name="t.graceful", timeout_s=10, timeout_grace_s=60)
    def graceful() -> None: ...

    with pytest.raises(echomq.InvalidArgument,
                       match="task 't.graceful': timeout_grace_s .* below the lease"):
        app.worker(lease_ms=30_000)
    with pytest.raises(echomq.InvalidArgument, match="timeout_s must be a number of seconds"):
        graceful.enqueue_with(timeout_s=0)


def test_timeouts_and_abandoned_runs_are_counted_for_prometheus(app, names, workers) -> None:
    from echomq.prometheus import render
    from tests.prometheus.scrape import parse, value

    queue = names("q")
    release = threading.Event()

    @app.task(queue=queue, name="t.counted", max_attempts=1, timeout_s=0.2,
              timeout_grace_s=0.2)
    def counted() -> None:
        release.wait(3600)

    job_id = counted.enqueue()
    workers.start(app, [queue])
    finished(app, queue, job_id)
    release.set()
    samples = parse(render(app.conn)[0])
    for event, expected in (("timeouts", 1), ("abandoned", 1), ("killed", 0)):
        found = value(samples, "echomq_worker_events_total", queue=queue, event=event)
        assert found == expected, (event, found)
