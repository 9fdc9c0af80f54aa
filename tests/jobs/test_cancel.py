"""Cooperative cancel: tokens (host-side, no wire identity) and ``request`` by id."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import echomq
from echomq.cancel import Cancelled, CancelledError
from echomq.queue.events import channel
from echomq.queue.keys import Keys
from tests.support.keyspace import dump
from tests.support.waits import wait_until

LONG = 60_000

# --- tokens ---------------------------------------------------------------------------------


def test_a_fresh_token_is_not_cancelled() -> None:
    token = echomq.cancel.new()
    assert echomq.cancel.check(token) is None
    echomq.cancel.check_or_raise(token)  # returns at once


def test_a_cancelled_token_answers_with_its_reason() -> None:
    token = echomq.cancel.new()
    echomq.cancel.cancel(token, "operator asked")
    assert echomq.cancel.check(token) == Cancelled("operator asked")
    with pytest.raises(CancelledError) as caught:
        echomq.cancel.check_or_raise(token)
    assert caught.value.reason == "operator asked"
    assert isinstance(caught.value, echomq.EchoMQError)
    # a cancellation stays: it is not consumed by being seen
    assert echomq.cancel.check(token) == Cancelled("operator asked")


def test_a_cancel_without_a_reason() -> None:
    token = echomq.cancel.new()
    echomq.cancel.cancel(token)
    assert echomq.cancel.check(token) == Cancelled(None)
    with pytest.raises(CancelledError) as caught:
        echomq.cancel.check_or_raise(token)
    assert caught.value.reason is None


def test_the_first_reason_wins() -> None:
    token = echomq.cancel.new()
    echomq.cancel.cancel(token, "first")
    echomq.cancel.cancel(token, "second")
    echomq.cancel.cancel(token)
    assert echomq.cancel.check(token) == Cancelled("first")


def test_a_token_answers_only_its_own_cancellation() -> None:
    mine, theirs = echomq.cancel.new(), echomq.cancel.new()
    assert mine != theirs
    echomq.cancel.cancel(theirs, "not yours")
    assert echomq.cancel.check(mine) is None
    echomq.cancel.check_or_raise(mine)
    assert echomq.cancel.check(theirs) == Cancelled("not yours")


def test_check_never_blocks() -> None:
    live, cancelled = echomq.cancel.new(), echomq.cancel.new()
    echomq.cancel.cancel(cancelled, "r")
    answers = [echomq.cancel.check(live) for _ in range(50_000)]
    answers += [echomq.cancel.check(cancelled) for _ in range(50_000)]
    assert answers.count(None) == 50_000
    assert answers[-1] == Cancelled("r")


def test_a_cancel_from_another_thread_is_observed() -> None:
    token = echomq.cancel.new()
    started = threading.Event()
    seen: list[Any] = []
    checks = 0

    def handler() -> None:
        nonlocal checks
        started.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            checks += 1
            try:
                echomq.cancel.check_or_raise(token)
            except CancelledError as exc:
                seen.append(exc.reason)
                return

    thread = threading.Thread(target=handler)
    thread.start()
    started.wait(5)
    wait_until(lambda: checks > 100)  # the handler is running and finding nothing
    echomq.cancel.cancel(token, "from main")
    thread.join(10)
    assert seen == ["from main"]


def race_cancels(cancellers: int) -> tuple[Cancelled | None, list[Cancelled]]:
    """Cancel one token from several threads at once while another thread checks it."""
    token = echomq.cancel.new()
    barrier = threading.Barrier(cancellers + 1)
    seen: list[Cancelled] = []

    def watch() -> None:
        barrier.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(seen) < 200:
            found = echomq.cancel.check(token)
            if found is not None:
                seen.append(found)

    def cancel(i: int) -> None:
        barrier.wait()
        echomq.cancel.cancel(token, f"r{i}")

    threads = [threading.Thread(target=watch)]
    threads += [threading.Thread(target=cancel, args=(i,)) for i in range(cancellers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return echomq.cancel.check(token), seen


def test_concurrent_cancels_agree_on_one_reason() -> None:
    # a checker that saw one reason never sees another: the first reason wins, also
    # when several threads cancel at once
    for _ in range(20):
        final, seen = race_cancels(8)
        assert final is not None and final.reason in {f"r{i}" for i in range(8)}
        assert set(seen) == {final}


# --- request by id ------------------------------------------------------------------------


@pytest.fixture
def subscriber(conn: echomq.Connection, server_url: str, queue: str) -> Iterator[Any]:
    client = redis.Redis.from_url(server_url, decode_responses=True)
    pubsub = client.pubsub()
    pubsub.subscribe(channel(conn, queue))
    confirm = wait_until(lambda: pubsub.get_message(timeout=0.1))
    assert confirm["type"] == "subscribe"
    yield pubsub
    pubsub.close()
    client.close()


def next_message(pubsub: Any, timeout: float = 5.0) -> dict[str, Any]:
    message = wait_until(lambda: pubsub.get_message(timeout=0.05), timeout=timeout)
    assert message["type"] == "message"
    return dict(json.loads(message["data"]))


def test_a_pending_job_is_removed(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    other = echomq.add(conn, queue, {"n": 2})
    assert echomq.cancel.request(conn, queue, job_id, "not needed") == "removed"
    assert echomq.get_job(conn, queue, job_id) is None
    assert conn.redis.zscore(Keys(queue).pending, job_id) is None
    assert [j.id for j in echomq.claim(conn, queue, lease_ms=LONG, count=5)] == [other]


def test_a_scheduled_job_is_removed(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, delay_ms=LONG)
    assert echomq.cancel.request(conn, queue, job_id) == "removed"
    assert echomq.get_job(conn, queue, job_id) is None
    assert conn.redis.zscore(Keys(queue).scheduled, job_id) is None


def test_a_scheduled_retry_is_removed(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    assert echomq.fail(conn, queue, job_id, held.token, "boom", backoff_ms=LONG) == "retrying"
    assert echomq.cancel.request(conn, queue, job_id) == "removed"
    assert echomq.get_job(conn, queue, job_id) is None


def test_an_active_job_is_signalled_to_a_live_subscriber(
    conn: echomq.Connection, queue: str, subscriber: Any
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    # the add to an empty queue woke idle consumers: skip that event
    assert next_message(subscriber) == {"event": "added"}
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    before = dump(conn.redis, queue)
    assert echomq.cancel.request(conn, queue, job_id, "user left") == "signalled"
    assert next_message(subscriber) == {"event": "cancel", "job": job_id, "reason": "user left"}
    assert dump(conn.redis, queue) == before  # a signal, not a transition
    echomq.cancel.request(conn, queue, job_id)
    assert next_message(subscriber) == {"event": "cancel", "job": job_id}
    echomq.complete(conn, queue, job_id, held.token)


def test_an_active_job_with_no_subscriber_is_signalled_and_runs_on(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    assert conn.redis.pubsub_numsub(channel(conn, queue)) == [(channel(conn, queue), 0)]
    assert echomq.cancel.request(conn, queue, job_id, "nobody hears") == "signalled"
    # at most once: the signal is gone, the job is still held and settles normally
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.state == "active"
    assert conn.redis.zscore(Keys(queue).active, job_id) is not None
    echomq.complete(conn, queue, job_id, held.token, "finished anyway")
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.result == "finished anyway"


@pytest.mark.parametrize("final", ["completed", "dead"])
def test_a_finished_job_is_not_cancellable(
    conn: echomq.Connection, queue: str, final: str
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, max_attempts=1)
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    if final == "completed":
        echomq.complete(conn, queue, job_id, held.token)
    else:
        echomq.fail(conn, queue, job_id, held.token, "boom")
    before = dump(conn.redis, queue)
    with pytest.raises(echomq.NotCancellable, match=final):
        echomq.cancel.request(conn, queue, job_id)
    assert dump(conn.redis, queue) == before


def test_no_row_is_gone(conn: echomq.Connection, queue: str) -> None:
    with pytest.raises(echomq.JobGone):
        echomq.cancel.request(conn, queue, "never-added")
    job_id = echomq.add(conn, queue, {"n": 1})
    assert echomq.cancel.request(conn, queue, job_id) == "removed"
    with pytest.raises(echomq.JobGone):
        echomq.cancel.request(conn, queue, job_id)


def test_a_grouped_pending_job_is_removed_from_its_lane(
    conn: echomq.Connection, queue: str
) -> None:
    keys = conn.keys(queue)
    job_id = echomq.add(conn, queue, {"n": 1}, group="acct")
    assert conn.redis.smembers(keys.groups) == {"acct"}
    assert echomq.cancel.request(conn, queue, job_id) == "removed"
    assert echomq.get_job(conn, queue, job_id) is None
    # the lane it emptied leaves `groups` and the ring in the same call
    assert conn.redis.exists(keys.lane("acct"), keys.groups, keys.ring) == 0
    assert echomq.counts(conn, queue) == echomq.Counts(0, 0, 0, 0, 0)


@pytest.mark.parametrize("claimed", ["before", "after"])
def test_a_claim_racing_a_request_meets_one_decision(
    conn: echomq.Connection, server_url: str, executor: str, queue: str, subscriber: Any,
    monkeypatch: pytest.MonkeyPatch, claimed: str,
) -> None:
    # A worker claims the job just before the request reaches the server, or just after
    # its first round trip (with a state read and a removal apart, that claim landed
    # between them and the request raised NotRemovable). One transition decides on the
    # state it acts on: the job claimed first is signalled; one removed first is gone
    # before the claim, which finds nothing.
    with pytest.raises(echomq.JobGone):  # the server knows every script the request runs
        echomq.cancel.request(conn, queue, "warm-up")
    job_id = echomq.add(conn, queue, {"n": 1})
    assert next_message(subscriber) == {"event": "added"}
    worker = echomq.connect(server_url, executor=executor)  # type: ignore[arg-type]
    held: list[list[echomq.ClaimedJob]] = []
    send = conn.redis.execute_command

    def claim_around_the_first_command(*args: Any, **kwargs: Any) -> Any:
        if not held and claimed == "before":
            held.append(echomq.claim(worker, queue, lease_ms=LONG))
        reply = send(*args, **kwargs)
        if not held:
            held.append(echomq.claim(worker, queue, lease_ms=LONG))
        return reply

    monkeypatch.setattr(conn.redis, "execute_command", claim_around_the_first_command)
    try:
        outcome = echomq.cancel.request(conn, queue, job_id, "race")
    finally:
        monkeypatch.undo()
    [jobs] = held
    if claimed == "before":
        assert outcome == "signalled" and [j.id for j in jobs] == [job_id]
        assert next_message(subscriber) == {"event": "cancel", "job": job_id, "reason": "race"}
        echomq.complete(worker, queue, job_id, jobs[0].token)
    else:
        assert outcome == "removed" and jobs == []
        assert echomq.get_job(conn, queue, job_id) is None
    worker.close()
