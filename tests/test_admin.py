"""Operator verbs: purge forgets finished jobs in Redis, oldest first."""

from __future__ import annotations

import pytest

import echomq
from echomq.queue.keys import Keys


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
