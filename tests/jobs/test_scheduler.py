"""The APScheduler batch jobs: the stalled sweep runs with no manual call, and two
schedulers on one queue never count a stall twice."""

from __future__ import annotations

import threading
import time

import echomq
from echomq.scheduling.scheduler import BatchScheduler
from tests.support.waits import wait_until


def test_the_scheduled_sweep_recovers_a_lapsed_job_without_a_manual_call(conn, queue):
    job_id = echomq.add(conn, queue, {})
    (held,) = echomq.claim(conn, queue, lease_ms=100)
    with BatchScheduler(conn) as batch:
        batch.add_sweep(queue, interval_ms=50, max_stalled=2)
        wait_until(lambda: echomq.counts(conn, queue).pending == 1)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.state == "pending" and job.stalled == 1
    assert batch.sweeps[queue].recovered == [held.id] or batch.passes > 1


def test_two_schedulers_never_double_count_a_stall(conn, queue):
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(50)])
    echomq.claim(conn, queue, lease_ms=100, count=50)
    first, second = BatchScheduler(conn), BatchScheduler(conn)
    for batch in (first, second):
        batch.add_sweep(queue, interval_ms=20, max_stalled=5)
    with first, second:
        wait_until(lambda: echomq.counts(conn, queue).pending == 50)
        time.sleep(0.1)  # more passes over an empty active set change nothing
    stalls = [echomq.get_job(conn, queue, i).stalled for i in ids]  # type: ignore[union-attr]
    assert stalls == [1] * 50


def test_a_failing_pass_is_logged_and_the_next_one_runs(conn, queue, private_server, caplog):
    private = echomq.connect(private_server.url, executor=conn.executor_name)
    echomq.add(private, queue, {})
    echomq.claim(private, queue, lease_ms=100)
    with BatchScheduler(private) as batch:
        batch.add_sweep(queue, interval_ms=50)
        private_server.stop()
        time.sleep(0.2)  # passes fail while the server is down
        private_server.start()
        # the scripted sweep counts the stall (dead at max_stalled=1); the functions
        # sweep sees a lease from before the restart and recovers it uncounted
        settled = "dead" if conn.executor_name == "scripts" else "pending"
        wait_until(lambda: getattr(echomq.counts(private, queue), settled) == 1)
    assert "stalled sweep" in caplog.text and "failed" in caplog.text


def test_fold_jobs_run_on_the_same_scheduler(conn, queue):
    ran = threading.Event()
    with BatchScheduler(conn) as batch:
        batch.add_fold(ran.set, interval_ms=50)
        assert ran.wait(5)


def test_the_scheduler_applies_every_queues_retention_on_its_interval(conn, queue, caplog):
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(6)])
    for job in echomq.claim(conn, queue, lease_ms=10_000, count=6):
        echomq.complete(conn, queue, job.id, job.token, None)
    echomq.set_retention(conn, queue, completed_count=2)
    caplog.set_level("INFO", logger="echomq.retention")
    with BatchScheduler(conn) as batch:
        batch.add_retention(interval_ms=50)
        wait_until(lambda: echomq.counts(conn, queue).completed == 2)
        more = echomq.add_many(conn, queue, [{"n": i} for i in range(3)])  # later arrivals
        for job in echomq.claim(conn, queue, lease_ms=10_000, count=3):
            echomq.complete(conn, queue, job.id, job.token, None)
        wait_until(lambda: [i for i in ids + more if echomq.get_job(conn, queue, i)]
                   == more[1:])
    assert batch.retention_passes >= 2
    assert f"retention of {queue!r}: forgot" in caplog.text
    echomq.set_retention(conn, queue)  # off the shared server's retained set
