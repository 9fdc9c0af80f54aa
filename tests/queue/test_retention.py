"""Retention on an undeclared queue: purge by count and by age, the stored policy, the
set of retained queues, and what each verb refuses before the wire."""

from __future__ import annotations

import time

import pytest

import echomq
from echomq.queue.retention import purge_counted, retained_queues


def settle(conn, queue: str, n: int, *, dead: bool = False) -> list[str]:
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(n)], max_attempts=1)
    for job in echomq.claim(conn, queue, lease_ms=10_000, count=n):
        if dead:
            echomq.fail(conn, queue, job.id, job.token, "broken")
        else:
            echomq.complete(conn, queue, job.id, job.token, job.payload["n"])
    return ids


def present(conn, queue: str, ids: list[str]) -> list[str]:
    return [i for i in ids if echomq.get_job(conn, queue, i) is not None]


def test_older_than_forgets_only_rows_that_finished_before_it(conn, queue):
    old = settle(conn, queue, 3)
    time.sleep(0.3)
    new = settle(conn, queue, 2)
    assert echomq.purge(conn, queue, "completed", older_than_ms=200) == 3
    assert present(conn, queue, old + new) == new


def test_keep_and_older_than_must_both_hold(conn, queue):
    old = settle(conn, queue, 4)
    time.sleep(0.3)
    new = settle(conn, queue, 1)
    # four are old, but the newest three (one new, two old) are kept: two go
    assert echomq.purge(conn, queue, "completed", keep=3, older_than_ms=200) == 2
    assert present(conn, queue, old + new) == old[2:] + new
    # and the newest one is not old enough, whatever keep says
    assert echomq.purge(conn, queue, "completed", keep=0, older_than_ms=200) == 2
    assert present(conn, queue, old + new) == new


def test_a_dead_row_scored_zero_is_aged_by_its_finished_at(conn, queue):
    (legacy,) = settle(conn, queue, 1, dead=True)
    conn.redis.zadd(conn.keys(queue).dead, {legacy: 0})  # how old releases scored it
    (other,) = settle(conn, queue, 1, dead=True)
    assert echomq.purge(conn, queue, "dead", older_than_ms=3_600_000) == 0
    assert present(conn, queue, [legacy, other]) == [legacy, other]
    assert echomq.purge(conn, queue, "dead") == 2


def test_the_policy_is_stored_with_the_queue_and_listed(conn, queue):
    assert echomq.retention(conn, queue) == echomq.Retention()
    policy = echomq.set_retention(conn, queue, completed_age_ms=60_000, dead_count=5)
    assert echomq.retention(conn, queue) == policy == echomq.Retention(60_000, None, None, 5)
    assert queue in retained_queues(conn)
    echomq.set_retention(conn, queue, completed_count=0)  # None clears the others
    assert echomq.retention(conn, queue) == echomq.Retention(completed_count=0)
    echomq.set_retention(conn, queue)
    assert echomq.retention(conn, queue).empty and queue not in retained_queues(conn)


def test_apply_retention_forgets_rows_past_either_limit(conn, queue):
    old_dead = settle(conn, queue, 3, dead=True)
    time.sleep(0.3)
    done = settle(conn, queue, 5)
    new_dead = settle(conn, queue, 1, dead=True)
    echomq.set_retention(conn, queue, completed_count=2, dead_age_ms=200)
    report = echomq.apply_retention(conn, queue)
    assert (report.purged["completed"].forgotten, report.purged["dead"].forgotten) == (3, 3)
    assert report.forgotten == 6 and report.kept_for_archive == 0
    assert present(conn, queue, old_dead + done + new_dead) == done[-2:] + new_dead


def test_a_prefix_keeps_its_own_retained_set(server_url, queue):
    first = echomq.connect(server_url, prefix="tenant-a")
    second = echomq.connect(server_url, prefix="tenant-b")
    try:
        echomq.set_retention(first, queue, completed_count=1)
        assert queue in retained_queues(first) and queue not in retained_queues(second)
        assert first.redis.sismember("tenant-a:retained", queue)
    finally:
        echomq.set_retention(first, queue)
        first.close()
        second.close()


@pytest.mark.parametrize("call", [
    lambda c, q: echomq.purge(c, q, "pending"),
    lambda c, q: echomq.purge(c, q, "dead", keep=-1),
    lambda c, q: echomq.purge(c, q, "dead", older_than_ms=-5),
    lambda c, q: echomq.purge(c, q, "dead", older_than_ms=2**60),
    lambda c, q: echomq.set_retention(c, q, completed_age_ms=0),
    lambda c, q: echomq.set_retention(c, q, dead_count=-1),
    lambda c, q: echomq.set_retention(c, q, dead_age_ms=True),
])
def test_bad_input_is_refused_before_the_wire(conn, queue, call):
    with pytest.raises(echomq.InvalidArgument):
        call(conn, queue)
    assert not conn.redis.exists(conn.keys(queue).meta)


def test_purged_counts_and_the_old_keyword(conn, queue):
    settle(conn, queue, 3)
    assert purge_counted(conn, queue, "completed", keep=1) == echomq.Purged("completed", 2, 0)


@pytest.mark.parametrize("keep, limit", [("x", 10), ("-1", 10), ("0", 0), ("0", 1001)])
def test_the_purge_script_refuses_a_garbage_count_on_the_wire(conn, queue, keep, limit):
    """A direct call past the Python gate forgets nothing on either executor."""
    settle(conn, queue, 2)
    keys = conn.keys(queue)
    with pytest.raises(echomq.InvalidArgument, match="EMQ.PURGE"):
        conn.executor.run("purge", [keys.completed, keys.meta], [keys.base, keep, limit, -1, 0])
    assert echomq.counts(conn, queue).completed == 2
