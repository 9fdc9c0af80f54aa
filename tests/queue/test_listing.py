"""list_jobs on both executors: pages of each state's set, the grouped lanes, vanished
rows, and refusals before the wire."""

from __future__ import annotations

from typing import Any

import pytest

import echomq
from tests.support.keyspace import dump

LONG = 60_000


def ids(jobs: list[echomq.Job]) -> list[str]:
    return [job.id for job in jobs]


def test_dead_jobs_page_newest_first_with_their_errors(conn: echomq.Connection,
                                                       queue: str) -> None:
    added = echomq.add_many(conn, queue, [{"n": i} for i in range(5)], max_attempts=1)
    for held in echomq.claim(conn, queue, lease_ms=LONG, count=5):
        echomq.fail(conn, queue, held.id, held.token, f"error {held.payload['n']}")
    died = ids(echomq.list_jobs(conn, queue, "dead", newest_first=False))
    assert sorted(died) == sorted(added)
    assert ids(echomq.list_jobs(conn, queue, "dead")) == died[::-1]
    page = echomq.list_jobs(conn, queue, "dead", start=1, count=2, newest_first=False)
    assert ids(page) == died[1:3]
    assert all(job.state == "dead" and job.last_error == f"error {job.payload['n']}"
               for job in page)
    assert echomq.list_jobs(conn, queue, "dead", start=5) == []


def test_each_state_lists_its_own_jobs(conn: echomq.Connection, queue: str) -> None:
    done, held, waiting = echomq.add_many(conn, queue, [1, 2, 3])
    later = echomq.add(conn, queue, 4, delay_ms=LONG)
    first, second = echomq.claim(conn, queue, lease_ms=LONG, count=2)
    echomq.complete(conn, queue, first.id, first.token, "ok")
    assert (first.id, second.id) == (done, held)
    assert ids(echomq.list_jobs(conn, queue, "pending")) == [waiting]
    assert ids(echomq.list_jobs(conn, queue, "scheduled")) == [later]
    assert ids(echomq.list_jobs(conn, queue, echomq.JobState.ACTIVE)) == [held]
    [completed] = echomq.list_jobs(conn, queue, "completed")
    assert (completed.id, completed.result) == (done, "ok")
    assert echomq.list_jobs(conn, queue, "dead") == []


def test_pending_pages_across_the_pending_set_then_each_lane(conn: echomq.Connection,
                                                             queue: str) -> None:
    plain = echomq.add_many(conn, queue, [1, 2])
    in_b = echomq.add_many(conn, queue, [3, 4], group="b")
    in_a = echomq.add_many(conn, queue, [5, 6, 7], group="a")
    oldest = ids(echomq.list_jobs(conn, queue, "pending", newest_first=False))
    assert oldest == [*plain, *in_a, *in_b]  # ungrouped first, then lanes by group name
    newest = ids(echomq.list_jobs(conn, queue, "pending"))
    assert newest == [*plain[::-1], *in_a[::-1], *in_b[::-1]]
    pages = [ids(echomq.list_jobs(conn, queue, "pending", start=s, count=3, newest_first=False))
             for s in (0, 3, 6, 9)]
    assert pages == [oldest[0:3], oldest[3:6], oldest[6:7], []]
    assert [job.group for job in echomq.list_jobs(conn, queue, "pending", start=2, count=1,
                                                  newest_first=False)] == ["a"]


def test_a_row_that_vanished_is_skipped(conn: echomq.Connection, queue: str) -> None:
    kept, gone = echomq.add_many(conn, queue, [1, 2])
    conn.redis.delete(conn.keys(queue).job(gone))  # the row leaves; its set entry stays
    assert ids(echomq.list_jobs(conn, queue, "pending")) == [kept]


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"state": "cancelled"}, echomq.InvalidArgument),
    ({"state": "PENDING"}, echomq.InvalidArgument),
    ({"state": None}, echomq.InvalidArgument),
    ({"state": "dead", "count": 0}, echomq.InvalidArgument),
    ({"state": "dead", "count": 1001}, echomq.InvalidArgument),
    ({"state": "dead", "start": -1}, echomq.InvalidArgument),
    ({"state": "dead", "start": 1.5}, echomq.InvalidArgument),
    ({"state": "dead", "queue": "bad queue"}, echomq.InvalidKey),
])
def test_list_jobs_refuses_bad_input_before_the_wire(
    conn: echomq.Connection, queue: str, kwargs: dict[str, Any], error: type[Exception],
) -> None:
    echomq.add(conn, queue, 1)
    before = dump(conn.redis, queue)
    kwargs = dict(kwargs)  # the parameter is shared by both executors' runs
    target = kwargs.pop("queue", queue)
    state = kwargs.pop("state")
    with pytest.raises(error):
        echomq.list_jobs(conn, target, state, **kwargs)
    assert dump(conn.redis, queue) == before
