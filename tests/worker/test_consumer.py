"""The Consumer on a real server: outcomes, cancel, checkpoints, recovery, shutdown."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import echomq
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys
from echomq.worker.consumer import Consumer
from echomq.worker.held import Held
from tests.support.consumers import ConsumerThreads
from tests.support.waits import wait_until


@pytest.fixture
def start(conn: Connection, queue: str) -> Iterator[Callable[..., Consumer]]:
    """Run Consumers on background threads; stop them all at the end of the test."""
    threads = ConsumerThreads(conn, queue, poll_ms=100)
    yield threads.start
    threads.stop_all()


def stream_entries(conn: Connection, queue: str) -> list[dict[str, str]]:
    return [fields for _, fields in conn.redis.xrange(Keys(queue).completions)]


def test_completes_every_job_once_and_records_it(conn, queue, start):
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(300)])
    start(lambda job: job.payload["n"] * 2, concurrency=4, record=True)
    wait_until(lambda: echomq.counts(conn, queue).completed == 300)
    assert echomq.counts(conn, queue).as_dict() == {
        "pending": 0, "scheduled": 0, "active": 0, "completed": 300, "dead": 0, "paused": False}
    entries = stream_entries(conn, queue)
    assert sorted(e["job"] for e in entries) == sorted(ids)
    assert {e["outcome"] for e in entries} == {"completed"}
    job = echomq.get_job(conn, queue, ids[7])
    assert job is not None and job.result == 14


def test_failure_retries_then_dead_with_traceback(conn, queue, start):
    echomq.archive.declare(conn, queue)
    job_id = echomq.add(conn, queue, {}, max_attempts=3)

    def broken(job: Any) -> None:
        raise RuntimeError(f"boom on attempt {job.attempts}")

    start(broken, backoff_ms=20)
    wait_until(lambda: echomq.counts(conn, queue).dead == 1)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.attempts == 3
    assert (job.last_error or "").startswith("RuntimeError: boom on attempt 3")
    (entry,) = stream_entries(conn, queue)
    assert entry["outcome"] == "dead" and "boom on attempt 3" in entry["result"]


def until_cancelled(job: Any, seconds: float) -> Any:
    """A cooperative handler's body: check the token every 10 ms for ``seconds``; the
    cancel's verdict, or "not cancelled"."""
    for _ in range(int(seconds * 100)):
        found = echomq.cancel.check(job.cancel_token)
        if found is not None:
            return echomq.CancelVerdict(found.reason)
        time.sleep(0.01)
    return "not cancelled"


def test_cancel_request_reaches_the_running_handler(conn, queue, start):
    started = threading.Event()

    def careful(job: Any) -> Any:
        started.set()
        return until_cancelled(job, 5.0)

    start(careful, cancel=True, record=True)
    job_id = echomq.add(conn, queue, {})
    assert started.wait(5)
    assert echomq.cancel.request(conn, queue, job_id, reason="user asked") == "signalled"
    wait_until(lambda: echomq.counts(conn, queue).completed == 1)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.cancel_reason == "user asked" and job.result is None
    (entry,) = stream_entries(conn, queue)
    assert entry == {**entry, "outcome": "cancelled", "result": "user asked", "job": job_id}


def test_a_cancel_published_before_the_claim_is_taken_in_still_reaches_the_job(
        conn, queue, start, monkeypatch):
    """A cancel is published once the job is active in Redis, which can be before the
    Consumer has taken the claim's reply in (a loaded machine: the demo once lost its
    cancel this way and the job completed). It applies when the job arrives."""
    job_id = echomq.add(conn, queue, {})
    take_in = Held.add

    def slow_take_in(self: Held, jobs: list[Any]) -> None:
        if any(job.id == job_id for job in jobs):
            assert echomq.cancel.request(conn, queue, job_id, reason="early") == "signalled"
            time.sleep(0.3)  # the event arrives while the job is not held yet
        take_in(self, jobs)

    monkeypatch.setattr(Held, "add", slow_take_in)

    start(lambda job: until_cancelled(job, 3.0), cancel=True)
    wait_until(lambda: echomq.counts(conn, queue).completed == 1)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.cancel_reason == "early"


def test_check_or_raise_settles_as_cancelled_never_retried(conn, queue, start):
    started = threading.Event()

    def raising(job: Any) -> None:
        started.set()
        while True:
            echomq.cancel.check_or_raise(job.cancel_token)
            time.sleep(0.01)

    start(raising, cancel=True)
    job_id = echomq.add(conn, queue, {}, max_attempts=5)
    assert started.wait(5)
    echomq.cancel.request(conn, queue, job_id, reason="stop")
    wait_until(lambda: echomq.counts(conn, queue).completed == 1)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.cancel_reason == "stop" and job.attempts == 1


def test_a_handler_that_never_checks_completes_normally(conn, queue, start):
    started = threading.Event()

    def oblivious(job: Any) -> str:
        started.set()
        time.sleep(0.3)
        return "finished anyway"

    start(oblivious, cancel=True)
    job_id = echomq.add(conn, queue, {})
    assert started.wait(5)
    assert echomq.cancel.request(conn, queue, job_id) == "signalled"
    wait_until(lambda: echomq.counts(conn, queue).completed == 1)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.result == "finished anyway"


def test_checkpointing_handler_outlives_many_sweeps_and_dead_worker_is_dead_lettered(
    conn, queue, start
):
    """The seed's worked example, compressed: lease 1 s, runs 2 s, checkpoints every
    250 ms, while the beat sweeps every 50 ms; a silently dead holder's job is
    dead-lettered with last_error = stalled. (A lease of 300 ms with checkpoints every
    100 ms left a loaded machine 200 ms, and the README's test command once lost it.)"""
    long_id = echomq.add(conn, queue, {"kind": "long"})

    def long_runner(job: Any) -> str:
        for _ in range(8):
            time.sleep(0.25)
            job.checkpoint()
        return "alive"

    # one slot and no buffer: the consumer holds only the long job
    start(long_runner, lease_ms=1_000, recovery="stalled", beat_ms=50, concurrency=1,
          prefetch=0)
    wait_until(lambda: echomq.counts(conn, queue).active == 1)
    crashed_id = echomq.add(conn, queue, {"kind": "crash"})
    # a second "worker" claims it and dies without a word
    (other,) = echomq.claim(conn, queue, lease_ms=300, count=1)
    assert other.id == crashed_id
    wait_until(lambda: echomq.counts(conn, queue).completed == 1, timeout=10)
    wait_until(lambda: echomq.counts(conn, queue).dead == 1, timeout=10)
    long_job = echomq.get_job(conn, queue, long_id)
    dead_job = echomq.get_job(conn, queue, crashed_id)
    assert long_job is not None and long_job.result == "alive" and long_job.stalled == 0
    assert dead_job is not None and dead_job.last_error == "stalled" and dead_job.stalled == 1


def test_auto_extend_keeps_a_silent_long_handler_alive(conn, queue, start):
    job_id = echomq.add(conn, queue, {})
    start(lambda job: time.sleep(1.0) or "ok", lease_ms=300, recovery="stalled", beat_ms=50,
          auto_extend=True)
    wait_until(lambda: echomq.counts(conn, queue).completed == 1)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.stalled == 0 and job.result == "ok"


def test_graceful_stop_hands_back_held_jobs_at_once(conn, queue):
    echomq.add_many(conn, queue, [{"n": i} for i in range(4)])
    consumer = Consumer(conn, queue, lambda job: time.sleep(3), concurrency=2, prefetch=2,
                        lease_ms=60_000, shutdown_grace_ms=100, poll_ms=100)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    thread.start()
    wait_until(lambda: echomq.counts(conn, queue).active == 4)
    consumer.stop()
    thread.join(5)
    assert not thread.is_alive()
    counts = echomq.counts(conn, queue)
    assert (counts.active, counts.pending) == (0, 4)
    # another worker takes them at once, not after the 60 s lease
    again = echomq.claim(conn, queue, lease_ms=1000, count=4)
    assert len(again) == 4 and all(j.attempts == 2 for j in again)


def test_wakes_on_new_jobs_without_busy_polling(conn, queue, start):
    consumer = start(lambda job: "ok", poll_ms=10_000)
    time.sleep(0.3)  # idle: the loop is parked on the 10 s poll
    t0 = time.monotonic()
    echomq.add(conn, queue, {})
    wait_until(lambda: consumer.processed == 1, timeout=5)
    assert time.monotonic() - t0 < 5  # woken by the event, not by the 10 s poll


def test_delayed_job_runs_when_due_while_idle(conn, queue, start):
    consumer = start(lambda job: "ok", poll_ms=10_000)
    echomq.add(conn, queue, {}, delay_ms=300)
    wait_until(lambda: consumer.processed == 1, timeout=5)


@pytest.mark.parametrize("dedup", [None, "once"])
def test_a_parked_worker_runs_a_delayed_job_due_before_its_wait_ends(conn, queue, start,
                                                                     dedup):
    """An idle worker parks until its first due scheduled job (here 60 s away) or its
    10 s poll; a delayed job added then, due in 300 ms, is announced as the new first
    due, so it runs then, not at the end of the parked wait."""
    echomq.add(conn, queue, {"later": True}, delay_ms=60_000)
    consumer = start(lambda job: "ok", poll_ms=10_000)
    time.sleep(0.5)  # idle: the loop is parked on min(poll, first due) = 10 s
    t0 = time.monotonic()
    echomq.add(conn, queue, {}, delay_ms=300, dedup_id=dedup)
    wait_until(lambda: consumer.processed == 1, timeout=5)
    assert 0.25 < time.monotonic() - t0 < 5


def test_bad_options_are_refused(conn, queue):
    with pytest.raises(echomq.InvalidArgument):
        Consumer(conn, queue, print, lease_ms=0)
    with pytest.raises(echomq.InvalidArgument):
        Consumer(conn, queue, print, recovery="never")  # type: ignore[arg-type]
    with pytest.raises(echomq.InvalidKey):
        Consumer(conn, "bad:name", print)


def test_adaptive_prefetch_holds_no_more_long_jobs_than_it_can_start_in_time(conn, queue, start):
    """Handlers of 150 ms under a 400 ms lease: buffering even one more job could
    lapse its lease before it starts, so the Consumer holds only what it runs."""
    echomq.add_many(conn, queue, [{"n": i} for i in range(6)])
    consumer = start(lambda job: time.sleep(0.15), concurrency=1, lease_ms=400)
    most = 0
    while consumer.processed < 6:
        most = max(most, echomq.counts(conn, queue).active)
        time.sleep(0.02)
    assert most == 1


def test_adaptive_prefetch_buffers_deeply_for_short_jobs(conn, queue, start):
    echomq.add_many(conn, queue, [{"n": i} for i in range(3000)])
    consumer = start(lambda job: time.sleep(0.0005), concurrency=2, lease_ms=30_000)
    most = 0
    while consumer.processed < 3000:
        most = max(most, echomq.counts(conn, queue).active)
        time.sleep(0.005)
    assert most > 2 * 2  # well beyond the running handlers: claims stay batched


def test_processed_counts_completions_only_never_a_dead_letter(conn, queue, start):
    """A handler that outlives its lease without a checkpoint is dead-lettered by the
    sweep while it runs; its late completion is refused and is not "processed"."""
    stalled_id = echomq.add(conn, queue, {"kind": "silent"})
    failing_id = echomq.add(conn, queue, {"kind": "fail"}, max_attempts=1)

    def handler(job: Any) -> str:
        if job.payload["kind"] == "fail":
            raise ValueError("no")
        time.sleep(0.8)
        return "too late"

    consumer = start(handler, lease_ms=200, beat_ms=50, recovery="stalled", concurrency=2,
                     prefetch=0)
    wait_until(lambda: echomq.counts(conn, queue).dead == 2)
    wait_until(lambda: consumer.failed == 1)
    time.sleep(1.0)  # the silent handler returns and its settle is refused
    job = echomq.get_job(conn, queue, stalled_id)
    assert job is not None and job.state == "dead" and job.last_error == "stalled"
    dead = echomq.get_job(conn, queue, failing_id)
    assert dead is not None and dead.state == "dead"
    assert (consumer.processed, consumer.failed) == (0, 1)
