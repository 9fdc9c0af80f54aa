"""The operator's verbs on both executors: pause/resume, promote, retry_dead, and
remove_job of finished jobs; every refusal before the wire."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import echomq
from tests.support.keyspace import dump
from tests.support.waits import wait_lapsed, wait_until

LONG = 60_000
SHORT = 40


def where(conn: echomq.Connection, queue: str, job_id: str) -> set[str]:
    """Which of the queue's sets and lanes hold ``job_id``."""
    keys = conn.keys(queue)
    found = {name for name in ("pending", "scheduled", "active", "completed", "dead")
             if conn.redis.zscore(getattr(keys, name), job_id) is not None}
    for group in conn.redis.smembers(keys.groups):
        if conn.redis.zscore(keys.lane(group), job_id) is not None:
            found.add(f"lane:{group}")
    return found


def dead_job(conn: echomq.Connection, queue: str, payload: Any = None, **options: Any) -> str:
    """A job failed until it is dead (``max_attempts=1`` unless given)."""
    options.setdefault("max_attempts", 1)
    job_id = echomq.add(conn, queue, payload, **options)
    while True:
        [held] = echomq.claim(conn, queue, lease_ms=LONG)
        assert held.id == job_id
        if echomq.fail(conn, queue, held.id, held.token, f"boom {held.token}",
                       backoff_ms=LONG) == "dead":
            return job_id
        echomq.promote(conn, queue, job_id)


@pytest.fixture
def events(conn: echomq.Connection, server_url: str, queue: str) -> Iterator[Any]:
    """A subscriber on the queue's events channel; yields a function reading what came."""
    client = redis.Redis.from_url(server_url, decode_responses=True)
    pubsub = client.pubsub()
    pubsub.subscribe(conn.keys(queue).events)
    assert wait_until(lambda: pubsub.get_message(timeout=0.1))["type"] == "subscribe"

    def read(settle: float = 0.2) -> list[str]:
        got = []
        while (message := pubsub.get_message(timeout=settle)) is not None:
            got.append(json.loads(message["data"])["event"])
        return got

    yield read
    pubsub.close()
    client.close()


# --- pause / resume ---------------------------------------------------------------------


def test_a_paused_queue_hands_out_nothing_but_takes_adds_and_settles(
    conn: echomq.Connection, queue: str
) -> None:
    first = echomq.add(conn, queue, {"n": 1})
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    assert echomq.pause(conn, queue) is True
    assert echomq.is_paused(conn, queue) is True
    assert echomq.pause(conn, queue) is False  # already paused: nothing changes
    later = echomq.add_many(conn, queue, [{"n": 2}, {"n": 3}])
    grouped = echomq.add(conn, queue, {"n": 4}, group="g")
    assert echomq.claim(conn, queue, lease_ms=LONG, count=10) == []
    echomq.complete(conn, queue, first, held.token, "done")  # a held job settles
    counts = echomq.counts(conn, queue)
    assert (counts.pending, counts.active, counts.completed, counts.paused) == (3, 0, 1, True)
    assert echomq.counts(conn, queue).as_dict()["paused"] is True

    assert echomq.resume(conn, queue) is True
    assert echomq.resume(conn, queue) is False
    assert echomq.is_paused(conn, queue) is False
    claimed = echomq.claim(conn, queue, lease_ms=LONG, count=10)
    assert sorted(j.id for j in claimed) == sorted([*later, grouped])
    assert echomq.counts(conn, queue).paused is False


def test_a_paused_queue_still_promotes_what_falls_due(conn: echomq.Connection,
                                                      queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, delay_ms=SHORT)
    echomq.pause(conn, queue)
    wait_until(lambda: echomq.claim(conn, queue) == [] and
               echomq.get_job(conn, queue, job_id).state == "pending")  # type: ignore[union-attr]
    assert where(conn, queue, job_id) == {"pending"}
    echomq.resume(conn, queue)
    assert [j.id for j in echomq.claim(conn, queue)] == [job_id]


def test_pause_and_resume_publish_events(conn: echomq.Connection, queue: str,
                                         events: Any) -> None:
    echomq.pause(conn, queue)
    echomq.pause(conn, queue)
    echomq.resume(conn, queue)
    echomq.resume(conn, queue)
    assert events() == ["paused", "resumed", "added"]  # added: the Consumer's wakeup


# --- promote ------------------------------------------------------------------------------


def test_promote_makes_a_delayed_job_pending_in_its_priority_place(
    conn: echomq.Connection, queue: str, events: Any
) -> None:
    low = echomq.add(conn, queue, {"n": "low"}, priority=5)
    delayed = echomq.add(conn, queue, {"n": "urgent"}, delay_ms=LONG, priority=0)
    assert events() == ["added", "added"]  # work, then the queue's first due delayed job
    echomq.promote(conn, queue, delayed)
    assert events() == ["added"]
    assert echomq.get_job(conn, queue, delayed).state == "pending"  # type: ignore[union-attr]
    assert where(conn, queue, delayed) == {"pending"}
    assert [j.id for j in echomq.claim(conn, queue, lease_ms=LONG, count=2)] == [delayed, low]


def test_promote_cuts_a_retry_backoff_short(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, max_attempts=3)
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    echomq.fail(conn, queue, job_id, held.token, "flaky", backoff_ms=LONG)
    assert echomq.claim(conn, queue) == []
    echomq.promote(conn, queue, job_id)
    [again] = echomq.claim(conn, queue, lease_ms=LONG)
    assert (again.id, again.token) == (job_id, 2)
    assert echomq.get_job(conn, queue, job_id).last_error == "flaky"  # type: ignore[union-attr]


def test_promote_puts_a_grouped_job_in_its_lane(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, delay_ms=LONG, group="g")
    echomq.promote(conn, queue, job_id)
    assert where(conn, queue, job_id) == {"lane:g"}
    assert [j.id for j in echomq.claim(conn, queue)] == [job_id]


def test_promote_refuses_what_is_not_scheduled(conn: echomq.Connection, queue: str) -> None:
    with pytest.raises(echomq.JobGone):
        echomq.promote(conn, queue, "never-added")
    pending = echomq.add(conn, queue, {"n": 1})
    before = dump(conn.redis, queue)
    with pytest.raises(echomq.NotScheduled):
        echomq.promote(conn, queue, pending)
    assert dump(conn.redis, queue) == before
    echomq.claim(conn, queue, lease_ms=LONG)
    with pytest.raises(echomq.NotScheduled):
        echomq.promote(conn, queue, pending)
    dead_id = dead_job(conn, queue)
    with pytest.raises(echomq.NotScheduled):
        echomq.promote(conn, queue, dead_id)


# --- remove_job of finished jobs ------------------------------------------------------------


@pytest.mark.parametrize("final", ["completed", "dead"])
def test_remove_takes_a_finished_job_away(conn: echomq.Connection, queue: str,
                                          final: str) -> None:
    if final == "dead":
        job_id = dead_job(conn, queue)
    else:
        job_id = echomq.add(conn, queue, {"n": 1})
        [held] = echomq.claim(conn, queue, lease_ms=LONG)
        echomq.complete(conn, queue, job_id, held.token, "ok")
    other = echomq.add(conn, queue, {"n": 2})
    assert where(conn, queue, job_id) == {final}
    echomq.remove_job(conn, queue, job_id)
    assert echomq.get_job(conn, queue, job_id) is None
    assert where(conn, queue, job_id) == set()
    assert echomq.get_job(conn, queue, other) is not None
    with pytest.raises(echomq.JobGone):
        echomq.remove_job(conn, queue, job_id)


def test_remove_never_takes_an_active_job(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    before = dump(conn.redis, queue)
    with pytest.raises(echomq.NotRemovable):
        echomq.remove_job(conn, queue, job_id)
    assert dump(conn.redis, queue) == before
    echomq.complete(conn, queue, job_id, held.token)  # the holder settles as usual


def test_cancel_still_refuses_a_finished_job(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    echomq.complete(conn, queue, job_id, held.token)
    with pytest.raises(echomq.NotCancellable):
        echomq.cancel.request(conn, queue, job_id)
    assert echomq.get_job(conn, queue, job_id) is not None


# --- retry_dead -----------------------------------------------------------------------------


def test_retry_dead_brings_a_job_back_with_its_history(conn: echomq.Connection,
                                                       queue: str) -> None:
    job_id = dead_job(conn, queue, {"n": 1}, max_attempts=2)
    dead = echomq.get_job(conn, queue, job_id)
    assert dead is not None and (dead.attempts, dead.retried) == (2, 0)
    assert echomq.retry_dead(conn, queue, [job_id]) == 1
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None
    assert (job.state, job.attempts, job.retried, job.last_error, job.finished_at) == (
        "pending", 2, 1, "boom 2", None)
    assert where(conn, queue, job_id) == {"pending"}
    # its tries start afresh: one failure is a retry again (max_attempts=2), the next is dead
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    assert held.token == 3
    assert echomq.fail(conn, queue, job_id, held.token, "again", backoff_ms=1,
                       backoff_cap_ms=1) == "retrying"
    [held] = wait_until(lambda: echomq.claim(conn, queue, lease_ms=LONG))
    assert echomq.fail(conn, queue, job_id, held.token, "still") == "dead"
    assert echomq.retry_dead(conn, queue, [job_id]) == 1
    assert echomq.get_job(conn, queue, job_id).retried == 2  # type: ignore[union-attr]


def test_a_zombie_of_the_last_attempt_stays_fenced_after_a_retry(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, max_attempts=1)
    [zombie] = echomq.claim(conn, queue, lease_ms=SHORT)
    wait_lapsed(conn.redis, queue, job_id)
    assert echomq.stalled_check(conn, queue, max_stalled=1).dead == [job_id]
    echomq.retry_dead(conn, queue)
    [fresh] = echomq.claim(conn, queue, lease_ms=LONG)
    assert fresh.token > zombie.token  # the token never goes down
    with pytest.raises(echomq.StaleToken):
        echomq.complete(conn, queue, job_id, zombie.token, "late")
    with pytest.raises(echomq.StaleToken):
        echomq.fail(conn, queue, job_id, zombie.token, "late")
    with pytest.raises(echomq.StaleToken):
        echomq.extend_lock(conn, queue, job_id, zombie.token, LONG)
    echomq.complete(conn, queue, job_id, fresh.token, "ok")
    assert echomq.get_job(conn, queue, job_id).result == "ok"  # type: ignore[union-attr]


def test_retry_dead_all_goes_in_batches_and_keeps_priority_order(
    conn: echomq.Connection, queue: str, events: Any
) -> None:
    ids = [dead_job(conn, queue, {"n": i}, priority=i % 3) for i in range(7)]
    events()
    assert echomq.counts(conn, queue).dead == 7
    assert echomq.retry_dead(conn, queue, limit=3) == 7
    assert events() == ["added", "added", "added"]  # one wakeup per batch that moved jobs
    assert echomq.counts(conn, queue).dead == 0 and echomq.counts(conn, queue).pending == 7
    claimed = [j.id for j in echomq.claim(conn, queue, lease_ms=LONG, count=10)]
    by_priority = sorted(range(7), key=lambda i: (i % 3, i))
    assert claimed == [ids[i] for i in by_priority]
    assert echomq.retry_dead(conn, queue) == 0
    assert events() == []  # nothing moved, nobody woken


def test_retry_dead_skips_what_is_not_dead(conn: echomq.Connection, queue: str) -> None:
    dead = dead_job(conn, queue)
    pending = echomq.add(conn, queue, {"n": 1})
    done = echomq.add(conn, queue, {"n": 2}, job_id="done")
    claimed = echomq.claim(conn, queue, lease_ms=LONG, count=2)
    held = next(j for j in claimed if j.id == done)
    echomq.complete(conn, queue, done, held.token)
    echomq.release_many(conn, queue, [(j.id, j.token) for j in claimed if j.id != done])
    before = dump(conn.redis, queue)
    assert echomq.retry_dead(conn, queue, [pending, done, "never-added"]) == 0
    assert dump(conn.redis, queue) == before
    assert echomq.retry_dead(conn, queue, [pending, dead, dead]) == 1
    assert echomq.retry_dead(conn, queue, []) == 0


def test_retry_dead_puts_a_grouped_job_back_in_its_lane(conn: echomq.Connection,
                                                        queue: str) -> None:
    job_id = dead_job(conn, queue, {"n": 1}, group="g")
    assert echomq.retry_dead(conn, queue) == 1
    assert where(conn, queue, job_id) == {"lane:g"}
    assert [j.id for j in echomq.claim(conn, queue)] == [job_id]


@pytest.mark.parametrize(("args", "kwargs", "error"), [
    ((), {"limit": 0}, echomq.InvalidArgument),
    ((), {"limit": 1001}, echomq.InvalidArgument),
    ((), {"limit": True}, echomq.InvalidArgument),
    (("dead-id",), {}, echomq.InvalidArgument),  # one string, not a list of ids
    ((["ok", "a b"],), {}, echomq.InvalidKey),
    ((["x{y}"],), {}, echomq.InvalidKey),
])
def test_retry_dead_refuses_bad_input_before_the_wire(
    conn: echomq.Connection, queue: str, args: tuple[Any, ...], kwargs: dict[str, Any],
    error: type[Exception],
) -> None:
    dead_job(conn, queue, job_id="ok")
    before = dump(conn.redis, queue)
    with pytest.raises(error):
        echomq.retry_dead(conn, queue, *args, **kwargs)
    assert dump(conn.redis, queue) == before


@pytest.mark.parametrize("verb", ["pause", "resume", "is_paused", "promote", "retry_dead",
                                  "remove_job"])
def test_every_verb_refuses_a_bad_queue_name(conn: echomq.Connection, verb: str) -> None:
    args: tuple[Any, ...] = ("job",) if verb in ("promote", "remove_job") else ()
    with pytest.raises(echomq.InvalidKey):
        getattr(echomq, verb)(conn, "bad:queue", *args)


@pytest.mark.parametrize("verb", ["promote", "remove_job"])
def test_job_verbs_refuse_a_bad_id(conn: echomq.Connection, queue: str, verb: str) -> None:
    with pytest.raises(echomq.InvalidKey):
        getattr(echomq, verb)(conn, queue, "a\nb")


def test_pause_is_per_prefix(server_url: str, executor: str, queue: str) -> None:
    tenant_a = echomq.connect(server_url, executor=executor, prefix="ta")  # type: ignore[arg-type]
    tenant_b = echomq.connect(server_url, executor=executor, prefix="tb")  # type: ignore[arg-type]
    try:
        echomq.add(tenant_a, queue, 1)
        echomq.add(tenant_b, queue, 2)
        echomq.pause(tenant_a, queue)
        assert (echomq.is_paused(tenant_a, queue), echomq.is_paused(tenant_b, queue)) == (
            True, False)
        assert echomq.claim(tenant_a, queue) == []
        assert [j.payload for j in echomq.claim(tenant_b, queue)] == [2]
        assert [j.payload for j in echomq.list_jobs(tenant_a, queue, "pending")] == [1]
    finally:
        tenant_a.close()
        tenant_b.close()
