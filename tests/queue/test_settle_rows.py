"""What a settle writes to a job's row, where ``complete-2.lua`` spares work on the hot path:
a ``None`` result is not written (an absent result reads as ``None``), and the row's group
is looked up only while some group has a job active. Both executors, real servers."""

from __future__ import annotations

import echomq
from echomq.jobs.settle import Settlement
from echomq.queue.connection import Connection

LONG = 60_000


def test_a_none_result_is_read_as_none_and_not_stored_on_the_row(
        conn: Connection, queue: str) -> None:
    none, value = echomq.add_many(conn, queue, [1, 2])
    held = {h.id: h for h in echomq.claim(conn, queue, lease_ms=LONG, count=2)}
    echomq.complete_many(conn, queue, [
        Settlement(none, held[none].token, "completed", "null"),
        Settlement(value, held[value].token, "completed", '{"sent":true}')], record=True)
    nothing, something = (echomq.get_job(conn, queue, i) for i in (none, value))
    assert nothing is not None and something is not None
    assert (nothing.state, nothing.result, nothing.finished_at is not None) == (
        "completed", None, True)
    assert "result" not in nothing.raw
    assert (something.result, something.raw["result"]) == ({"sent": True}, '{"sent":true}')
    # the recorded outcome still says what the handler returned
    recorded = {f["job"]: f["result"] for _, f in conn.redis.xrange(conn.keys(queue).completions)}
    assert recorded == {none: "null", value: '{"sent":true}'}


def test_one_settle_of_grouped_and_ungrouped_jobs_frees_each_group_slot(
        conn: Connection, queue: str) -> None:
    """A group's slot (limit 1) comes back in the same call that settles its job beside
    ungrouped ones, whichever comes first in the call; with no group active the queue's
    `gactive` hash is gone, and the next grouped jobs are claimed."""
    plain = echomq.add_many(conn, queue, [0, 1])
    a = echomq.add_many(conn, queue, [{"a": 1}, {"a": 2}], group="a")
    b = echomq.add_many(conn, queue, [{"b": 1}, {"b": 2}], group="b")
    held = echomq.claim(conn, queue, lease_ms=LONG, count=10)
    assert {h.id for h in held} == {*plain, a[0], b[0]}  # one job a group (limit 1)
    order = sorted(held, key=lambda h: h.id not in plain)  # ungrouped first, then grouped
    errors = echomq.complete_many(conn, queue, [
        Settlement(h.id, h.token, "completed", "null") for h in order])
    assert errors == [None] * 4
    assert not conn.redis.exists(conn.keys(queue).gactive)
    nxt = echomq.claim(conn, queue, lease_ms=LONG, count=10)
    assert {h.id for h in nxt} == {a[1], b[1]}
    # settled alone (the queue has active groups: the rows' groups are read again)
    echomq.complete_many(conn, queue, [Settlement(h.id, h.token, "completed", "null")
                                       for h in nxt])
    assert not conn.redis.exists(conn.keys(queue).gactive)
    assert echomq.counts(conn, queue).completed == 6
