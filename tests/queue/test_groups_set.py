"""The ``groups`` set holds the live groups only: a group leaves it in the call that empties
its lane, so ``counts`` (and the listings and a scrape) walk the groups that have jobs
waiting, never every group the queue has ever seen (50,000 one-job groups, run and
purged, made ``counts`` 390 ms)."""

from __future__ import annotations

import echomq
from echomq.queue.connection import Connection
from tests.support.waits import wait_lapsed

LONG = 60_000
SHORT = 40


def live(conn: Connection, queue: str) -> set[str]:
    return {str(g) for g in conn.redis.smembers(conn.keys(queue).groups)}


def test_one_job_groups_run_removed_dead_and_drained_leave_no_group_behind(
        conn: Connection, queue: str) -> None:
    ids = [echomq.add(conn, queue, {"i": i}, group=f"g{i}", max_attempts=1)
           for i in range(120)]
    later = echomq.add(conn, queue, {"later": 1}, group="later", delay_ms=LONG)
    pair = echomq.add_many(conn, queue, [{"p": 1}, {"p": 2}], group="pair")
    assert live(conn, queue) == {f"g{i}" for i in range(120)} | {"pair"}  # not "later"

    for job_id in ids[:10]:  # removed while pending
        echomq.remove_job(conn, queue, job_id)
    assert live(conn, queue) == {f"g{i}" for i in range(10, 120)} | {"pair"}

    held = echomq.claim(conn, queue, lease_ms=LONG, count=1000)
    assert len(held) == 111  # one of each group: the pair's second waits in its lane
    assert live(conn, queue) == {"pair"}
    assert echomq.counts(conn, queue) == echomq.Counts(1, 1, 111, 0, 0)
    for n, job in enumerate(held):
        if n % 3:
            echomq.complete(conn, queue, job.id, job.token, "ok")
        else:
            assert echomq.fail(conn, queue, job.id, job.token, "boom") == "dead"
    [second] = echomq.claim(conn, queue, lease_ms=SHORT)
    assert second.id == pair[1] and live(conn, queue) == set()

    # a lapsed lease puts the job back in its lane (the group is live again), then it runs
    wait_lapsed(conn.redis, queue, second.id)
    assert echomq.reap(conn, queue) == [second.id]
    assert live(conn, queue) == {"pair"}
    [again] = echomq.claim(conn, queue, lease_ms=LONG)
    echomq.complete(conn, queue, again.id, again.token, "ok")
    assert live(conn, queue) == set()

    # the delayed one joins when it is promoted, and a drain takes it (and its group) away
    echomq.promote(conn, queue, later)
    assert live(conn, queue) == {"later"}
    assert echomq.drain(conn, queue) == 1
    assert live(conn, queue) == set()

    echomq.purge(conn, queue, "completed")
    echomq.purge(conn, queue, "dead")
    assert echomq.counts(conn, queue) == echomq.Counts(0, 0, 0, 0, 0)
    assert live(conn, queue) == set()


def test_a_drain_that_stops_mid_batch_still_visits_every_lane(conn: Connection,
                                                              queue: str) -> None:
    """Emptied lanes leave the set as the drain goes: a batch that ends inside the set's
    SSCAN goes on from the same cursor and misses no lane."""
    from echomq.queue.bulk import drain_batches

    for i in range(300):
        echomq.add_many(conn, queue, [{"i": i}, {"i": -i}], group=f"d{i}")
    steps = list(drain_batches(conn, queue, batch=7))
    assert sum(steps) == 600 and len(steps) > 50
    assert live(conn, queue) == set()
    assert echomq.counts(conn, queue) == echomq.Counts(0, 0, 0, 0, 0)
