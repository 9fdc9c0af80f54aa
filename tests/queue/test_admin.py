"""Operator verbs: purge forgets finished jobs in Redis, oldest first; dead_jobs lists
them oldest first, every dead-letter ordered by when it died."""

from __future__ import annotations

import pytest

import echomq
from echomq.queue.keys import Keys
from tests.support.waits import server_ms, wait_lapsed, wait_until


def settle(conn, queue: str, n: int, *, dead: bool) -> list[str]:
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(n)], max_attempts=1)
    for start in range(0, n, 1000):
        for job in echomq.claim(conn, queue, lease_ms=10_000, count=min(1000, n - start)):
            if dead:
                echomq.fail(conn, queue, job.id, job.token, "broken")
            else:
                echomq.complete(conn, queue, job.id, job.token, job.payload["n"])
    return ids


def test_purge_dead_forgets_rows_and_the_dead_set(conn, queue):
    dead = settle(conn, queue, 5, dead=True)
    completed = settle(conn, queue, 3, dead=False)
    assert echomq.purge(conn, queue, "dead") == 5
    assert echomq.counts(conn, queue).dead == 0
    assert all(echomq.get_job(conn, queue, i) is None for i in dead)
    assert all(echomq.get_job(conn, queue, i) is not None for i in completed)


def test_purge_keeps_the_newest(conn, queue):
    ids = settle(conn, queue, 5, dead=False)
    assert echomq.purge(conn, queue, "completed", keep=2) == 3
    kept = [i for i in ids if echomq.get_job(conn, queue, i) is not None]
    assert len(kept) == 2 and echomq.counts(conn, queue).completed == 2


def test_purge_in_batches_beyond_one_call(conn, queue):
    settle(conn, queue, 1500, dead=False)  # more than one purge call's 1000
    assert echomq.purge(conn, queue, "completed") == 1500
    assert conn.redis.exists(Keys(queue).completed) == 0


def test_purge_refuses_live_states(conn, queue):
    with pytest.raises(echomq.InvalidArgument):
        echomq.purge(conn, queue, "pending")
    with pytest.raises(echomq.InvalidArgument):
        echomq.purge(conn, queue, "dead", keep=-1)


def fail_dead(conn, queue: str) -> str:
    """A job dead-lettered by a failure on its only try."""
    job_id = echomq.add(conn, queue, {"how": "failed"}, max_attempts=1)
    (held,) = echomq.claim(conn, queue, lease_ms=60_000)
    assert held.id == job_id
    assert echomq.fail(conn, queue, held.id, held.token, "broken") == "dead"
    return job_id


def stall_dead(conn, queue: str) -> str:
    """A job dead-lettered by the stalled sweep at the default threshold."""
    job_id = echomq.add(conn, queue, {"how": "stalled"})
    (held,) = echomq.claim(conn, queue, lease_ms=30)
    assert held.id == job_id
    wait_lapsed(conn.redis, queue, job_id)
    assert echomq.stalled_check(conn, queue).dead == [job_id]
    return job_id


def next_server_ms(conn) -> None:
    """Let the server clock move on, so the next death is strictly later."""
    start = server_ms(conn.redis)
    wait_until(lambda: server_ms(conn.redis) > start + 1)


@pytest.mark.parametrize("order", ["failure then stall", "stall then failure"])
def test_dead_letters_are_ordered_by_the_time_they_died(conn, queue, order):
    makers = [fail_dead, stall_dead] if order == "failure then stall" else [stall_dead, fail_dead]
    older = makers[0](conn, queue)
    next_server_ms(conn)
    newer = makers[1](conn, queue)
    assert echomq.dead_jobs(conn, queue) == [older, newer]  # oldest first
    for job_id in (older, newer):  # each scored by when it died, on the server clock
        row = echomq.get_job(conn, queue, job_id)
        assert row is not None
        assert conn.redis.zscore(Keys(queue).dead, job_id) == row.finished_at
    assert echomq.purge(conn, queue, "dead", keep=1) == 1
    assert echomq.dead_jobs(conn, queue) == [newer]
    assert echomq.get_job(conn, queue, older) is None
    assert echomq.get_job(conn, queue, newer) is not None
