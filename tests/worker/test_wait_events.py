"""A producer hears its jobs: progress from a handler, typed events, and ``wait``, against
a real Consumer on a real server, on both executors."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import echomq
from echomq import EventKind
from echomq.queue.connection import Connection
from tests.support.consumers import ConsumerThreads
from tests.support.waits import wait_until


@pytest.fixture
def start(conn: Connection, queue: str) -> Iterator[Callable[..., echomq.Consumer]]:
    """Run Consumers on background threads; stop them all at the end of the test."""
    threads = ConsumerThreads(conn, queue, poll_ms=100)
    yield threads.start
    threads.stop_all()


def until(stream: echomq.EventStream, kind: EventKind, job_id: str) -> list[echomq.Event]:
    """Events read from ``stream`` up to and including ``kind`` for ``job_id``."""
    seen = []
    for event in stream:
        seen.append(event)
        if event.kind is kind and event.job_id == job_id:
            return seen
    raise AssertionError(f"no {kind} for {job_id}; heard {seen}")


def numsub(conn: Connection, channel: str) -> int:
    """Subscribers of ``channel`` on the server of its slot (a Cluster node counts its
    own; the library subscribes where the channel's hash tag lives)."""
    client: Any = conn.redis
    if conn.cluster:
        found = client.pubsub_numsub(channel, target_nodes=client.get_node_from_key(channel))
    else:
        found = client.pubsub_numsub(channel)
    return int(dict(found)[channel])


# -- progress -----------------------------------------------------------------------------


def test_progress_from_a_handler_is_on_the_row_while_it_runs_and_in_the_events(
        conn, queue, start):
    reported, release = threading.Event(), threading.Event()

    def handler(job: Any) -> str:
        job.progress({"step": 1, "of": 2})
        reported.set()
        assert release.wait(10)
        job.progress({"step": 2, "of": 2})
        return "done"

    with echomq.events(conn, queue, timeout_s=20) as stream:
        job_id = echomq.add(conn, queue, {"n": 1})
        start(handler)
        assert reported.wait(10)
        running = echomq.get_job(conn, queue, job_id)
        assert running is not None and running.state is echomq.JobState.ACTIVE
        assert running.progress == {"step": 1, "of": 2}
        release.set()
        heard = until(stream, EventKind.COMPLETED, job_id)
    progress = [e.value for e in heard if e.kind is EventKind.PROGRESS]
    assert progress == [{"step": 1, "of": 2}, {"step": 2, "of": 2}]
    assert [e.kind for e in heard if e.job_id == job_id][-1] is EventKind.COMPLETED
    done = echomq.get_job(conn, queue, job_id)
    assert done is not None and done.result == "done"
    assert done.progress == {"step": 2, "of": 2}


def test_a_stale_holders_progress_is_refused_and_changes_nothing(conn, queue):
    job_id = echomq.add(conn, queue, {})
    [old] = echomq.claim(conn, queue, lease_ms=60_000)
    echomq.report_progress(conn, queue, job_id, old.token, "first")
    echomq.release_many(conn, queue, [(old.id, old.token)])
    [new] = echomq.claim(conn, queue, lease_ms=60_000)
    with pytest.raises(echomq.StaleToken):
        echomq.report_progress(conn, queue, job_id, old.token, "stale")
    echomq.report_progress(conn, queue, job_id, new.token, "second")
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.progress == "second"
    echomq.complete(conn, queue, job_id, new.token)
    with pytest.raises(echomq.NotActive):
        echomq.report_progress(conn, queue, job_id, new.token, "late")
    with pytest.raises(echomq.JobGone):
        echomq.report_progress(conn, queue, "nosuch", 1, "none")
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.progress == "second"


def test_a_handler_that_lost_its_lease_cannot_report_and_its_run_ends_lost(
        conn, queue, start):
    lost: list[BaseException] = []
    job_id = echomq.add(conn, queue, {})

    def handler(job: Any) -> None:
        # another holder took the job meanwhile: its token moved past ours
        echomq.release_many(conn, queue, [(job.id, job.token)])
        echomq.claim(conn, queue, lease_ms=60_000)
        try:
            job.progress("mine")
        except echomq.StaleToken as exc:
            lost.append(exc)
            raise

    # one slot and no buffer: while the handler runs, the Consumer claims nothing, so the
    # job it hands back is taken by the handler's own claim, not by the Consumer again
    start(handler, concurrency=1, prefetch=0)
    wait_until(lambda: lost)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.progress is None and job.attempts == 2


@pytest.mark.parametrize("value", [{1, 2}, float("nan"), "x" * (64 * 1024)])
def test_progress_that_is_not_json_or_too_large_is_refused_before_the_wire(
        conn, queue, value):
    job_id = echomq.add(conn, queue, {})
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    with pytest.raises(echomq.InvalidArgument, match="progress"):
        echomq.report_progress(conn, queue, job_id, held.token, value)
    assert "progress" not in conn.redis.hgetall(conn.keys(queue).job(job_id))


# -- wait ---------------------------------------------------------------------------------


def test_wait_returns_the_completed_job(conn, queue, start):
    job_id = echomq.add(conn, queue, {"n": 21})
    start(lambda job: time.sleep(0.2) or job.payload["n"] * 2)
    job = echomq.wait(conn, queue, job_id, timeout_s=20)
    assert job.state is echomq.JobState.COMPLETED and job.result == 42


def test_wait_returns_the_dead_job_after_its_retries_not_at_the_first_failure(
        conn, queue, start):
    job_id = echomq.add(conn, queue, {}, max_attempts=3)

    def broken(job: Any) -> None:
        raise RuntimeError(f"boom {job.attempts}")

    start(broken, backoff_ms=20)
    job = echomq.wait(conn, queue, job_id, timeout_s=20)
    assert job.state is echomq.JobState.DEAD and job.attempts == 3
    assert (job.last_error or "").startswith("RuntimeError: boom 3")


def test_wait_returns_the_cancelled_job(conn, queue, start):
    job_id = echomq.add(conn, queue, {})
    running = threading.Event()

    def handler(job: Any) -> echomq.CancelVerdict:
        running.set()
        while not job.cancelled():
            time.sleep(0.01)
        return echomq.CancelVerdict("enough")

    start(handler, cancel=True)
    assert running.wait(10)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(echomq.wait, conn, queue, job_id, 20)
        wait_until(lambda: numsub(conn, conn.keys(queue).job_events) > 0)
        echomq.cancel.request(conn, queue, job_id, "enough")
        job = waiting.result(20)
    assert job.state is echomq.JobState.COMPLETED and job.cancel_reason == "enough"


def test_wait_returns_at_once_for_a_finished_job(conn, queue):
    done_id, dead_id = echomq.add(conn, queue, {}), echomq.add(conn, queue, {}, max_attempts=1)
    for held in echomq.claim(conn, queue, lease_ms=60_000, count=2):
        if held.id == done_id:
            echomq.complete(conn, queue, held.id, held.token, "ok")
        else:
            echomq.fail(conn, queue, held.id, held.token, "bad")
    started = time.monotonic()
    assert echomq.wait(conn, queue, done_id).result == "ok"
    assert echomq.wait(conn, queue, dead_id).state is echomq.JobState.DEAD
    assert time.monotonic() - started < 5  # no timeout was given: it did not wait for one


def test_wait_for_an_unknown_job_raises_job_gone_at_once(conn, queue):
    with pytest.raises(echomq.JobGone, match="nosuch"):
        echomq.wait(conn, queue, "nosuch")


def test_wait_times_out_naming_the_job(conn, queue):
    job_id = echomq.add(conn, queue, {})
    with pytest.raises(TimeoutError, match=job_id) as raised:
        echomq.wait(conn, queue, job_id, timeout_s=0.3)
    assert isinstance(raised.value, echomq.WaitTimeout) and raised.value.job_id == job_id
    assert numsub(conn, conn.keys(queue).job_events) == 0  # unsubscribed


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), float("inf"), True, "3"])
def test_wait_refuses_a_bad_timeout_before_the_wire(conn, queue, timeout_s):
    with pytest.raises(echomq.InvalidArgument):
        echomq.wait(conn, queue, "any", timeout_s=timeout_s)


def test_a_job_removed_while_waited_on_raises_job_gone(conn, queue, monkeypatch):
    monkeypatch.setattr("echomq.queue.listen.RENEW_S", 0.2)  # the existence check's period
    job_id = echomq.add(conn, queue, {}, delay_ms=60_000)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(echomq.wait, conn, queue, job_id, 20)
        wait_until(lambda: numsub(conn, conn.keys(queue).job_events) > 0)
        echomq.remove_job(conn, queue, job_id)
        # removed before or after its one read: either way the waiter hears of it
        with pytest.raises(echomq.JobGone, match=f"job '{job_id}'"):
            waiting.result(20)


@pytest.mark.parametrize("when", ["before the read", "after the read"])
def test_a_job_settling_around_the_one_read_is_never_missed(conn, queue, monkeypatch, when):
    """The race closed deliberately: the job settles right after ``wait`` subscribed,
    just before its one read (the read sees it finished) or just after (it is heard)."""
    job_id = echomq.add(conn, queue, {})
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    real_read = echomq.queue.wait.get_job  # type: ignore[attr-defined]

    def settle_around_the_read(c: Connection, q: str, i: str) -> echomq.Job | None:
        if when == "before the read":
            echomq.complete(conn, queue, job_id, held.token, when)
            return real_read(c, q, i)
        job = real_read(c, q, i)
        if job is not None and job.state is echomq.JobState.ACTIVE:
            echomq.complete(conn, queue, job_id, held.token, when)
        return job

    monkeypatch.setattr("echomq.queue.wait.get_job", settle_around_the_read)
    job = echomq.wait(conn, queue, job_id, timeout_s=10)
    assert job.state is echomq.JobState.COMPLETED and job.result == when


def test_many_waiters_each_get_their_job_whenever_it_settles(conn, queue, start):
    """Short jobs settle before, during and after their waiter subscribes: the one read
    after subscribing closes the race, so every waiter returns its own job."""
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(120)])
    start(lambda job: job.payload["n"], concurrency=4)
    with ThreadPoolExecutor(24) as pool:
        jobs = list(pool.map(lambda i: echomq.wait(conn, queue, i, timeout_s=30), ids))
    assert [job.id for job in jobs] == ids
    assert [job.result for job in jobs] == list(range(120))


# -- events -------------------------------------------------------------------------------


def test_events_yields_typed_events_for_add_progress_settles_and_death(conn, queue, start):
    with echomq.events(conn, queue, timeout_s=20) as stream:
        ok = echomq.add(conn, queue, {"fail": False})
        bad = echomq.add(conn, queue, {"fail": True}, max_attempts=2)

        def handler(job: Any) -> str:
            job.progress(50)
            if job.payload["fail"]:
                raise ValueError("no")
            return "yes"

        start(handler, backoff_ms=20, concurrency=1)
        heard = until(stream, EventKind.DEAD, bad)
        if not any(e.kind is EventKind.COMPLETED for e in heard):
            heard += until(stream, EventKind.COMPLETED, ok)
    assert heard[0] == echomq.Event("added")
    assert echomq.Event("progress", ok, value=50) in heard
    assert echomq.Event("completed", ok) in heard
    bad_news = [(e.kind, e.reason) for e in heard if e.job_id == bad and
                e.kind is not EventKind.PROGRESS]
    assert [k for k, _ in bad_news] == [EventKind.FAILED, EventKind.DEAD]
    assert all(reason and reason.startswith("ValueError: no") for _, reason in bad_news)
    assert all(isinstance(e.kind, EventKind) for e in heard)


def test_events_skip_unknown_and_malformed_messages(conn, queue):
    keys = conn.keys(queue)
    with echomq.events(conn, queue, count=2, timeout_s=10) as stream:
        for junk in ("not json", "[1]", '{"event": 3}', '{"event":"completed"}',
                     '{"event":"someday","job":"1"}', '{"event":"dead","job":7}'):
            conn.redis.publish(keys.job_events, junk)
            conn.redis.publish(keys.events, junk)
        echomq.publish(conn, queue, "cancel", "j1", "why")
        conn.redis.publish(keys.job_events, '{"event":"completed","job":"j2"}')
        assert list(stream) == [echomq.Event("cancel", "j1", "why"),
                                echomq.Event("completed", "j2")]
        assert stream.closed  # ended by its count


def test_the_events_iterator_unsubscribes_when_closed_or_ended(conn, queue):
    keys = conn.keys(queue)
    stream = echomq.events(conn, queue)
    assert numsub(conn, keys.events) == 1 and numsub(conn, keys.job_events) == 1
    assert conn.redis.exists(keys.listeners)
    stream.close()
    stream.close()  # idempotent
    assert numsub(conn, keys.events) == 0 and numsub(conn, keys.job_events) == 0
    assert list(stream) == []
    with echomq.events(conn, queue, timeout_s=0.2) as timed:
        assert list(timed) == []
        assert timed.closed
    assert numsub(conn, keys.job_events) == 0
    for bad in ({"count": 0}, {"timeout_s": -1.0}):
        with pytest.raises(echomq.InvalidArgument):
            echomq.events(conn, queue, **bad)
    assert numsub(conn, keys.job_events) == 0


def test_with_nobody_listening_a_settle_publishes_nothing(conn, queue, start):
    """A pattern subscription hears every channel of the queue without setting the
    listener mark: the Consumer's settles (completions, retries, deaths) say nothing."""
    keys = conn.keys(queue)
    spy = conn.redis.pubsub(ignore_subscribe_messages=True)
    spy.psubscribe(keys.base + "*")
    wait_until(lambda: spy.subscribed and numpat(conn, keys.base) > 0)
    try:
        echomq.add_many(conn, queue, [{"fail": i % 10 == 0} for i in range(50)],
                        max_attempts=2)

        def handler(job: Any) -> None:
            if job.payload["fail"]:
                raise ValueError("no")

        start(handler, backoff_ms=20)
        wait_until(lambda: echomq.counts(conn, queue).dead == 5)
        wait_until(lambda: echomq.counts(conn, queue).completed == 45)
        conn.redis.publish(keys.base + "marker", "end")
        heard = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = spy.get_message(timeout=1)  # None for the psubscribe confirmation
            if message is None:
                continue
            if message["data"] == "end":
                break
            heard.append((message["channel"], message["data"]))
        else:
            raise AssertionError("the marker never arrived")
        assert heard == [(keys.events, '{"event":"added"}')]
        assert not conn.redis.exists(keys.listeners)
    finally:
        spy.close()


def numpat(conn: Connection, near: str) -> int:
    """Pattern subscriptions on the server of ``near``'s slot (a Cluster node counts its
    own; the spy subscribed where its pattern's hash tag lives)."""
    client: Any = conn.redis
    if conn.cluster:
        return int(client.pubsub_numpat(target_nodes=client.get_node_from_key(near)))
    return int(client.pubsub_numpat())
