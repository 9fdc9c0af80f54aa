"""drain and obliterate: what goes, what stays, what is refused, and that no single Lua call
does more than one batch (counted by the server's own command statistics)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import echomq
from echomq.archive import Driver, Floor, declare, declared_queues
from echomq.queue.bulk import drain_batches, obliterate_batches
from echomq.queue.connection import Connection
from echomq.queue.transitions.removals import BULK_BATCH
from echomq.servers.valkey import EmbeddedValkey

LONG = 60_000


def keys_of(conn: Connection, queue: str) -> list[str]:
    """Every key under the queue's base, found by a literal prefix test (no glob)."""
    base = conn.keys(queue).base
    return sorted(k for k in conn.redis.scan_iter(count=1000) if k.startswith(base))


def fill(conn: Connection, queue: str) -> dict[str, list[str]]:
    """Ungrouped, grouped (two groups) and scheduled jobs; two of them claimed."""
    out = {
        "plain": echomq.add_many(conn, queue, [{"p": i} for i in range(3)]),
        "g1": echomq.add_many(conn, queue, [{"g1": i} for i in range(3)], group="g1"),
        "g2": echomq.add_many(conn, queue, [{"g2": i} for i in range(2)], group="g2"),
        "later": echomq.add_many(conn, queue, [{"s": i} for i in range(2)], delay_ms=LONG),
    }
    return out


def test_drain_empties_pending_lanes_ring_and_scheduled_and_active_jobs_still_settle(
    conn: Connection, queue: str,
) -> None:
    ids = fill(conn, queue)
    held = echomq.claim(conn, queue, lease_ms=LONG, count=2)
    assert {j.id for j in held} & set(ids["plain"]) and {j.id for j in held} & set(ids["g1"])
    keys = conn.keys(queue)
    assert conn.redis.llen(keys.ring) > 0

    assert echomq.drain(conn, queue) == 10 - 2

    assert echomq.counts(conn, queue) == echomq.Counts(0, 0, 2, 0, 0)
    assert not conn.redis.exists(keys.lane("g1"), keys.lane("g2"), keys.ring)
    held_ids = {j.id for j in held}
    for job_id in (i for group in ids.values() for i in group if i not in held_ids):
        assert echomq.get_job(conn, queue, job_id) is None
    assert echomq.claim(conn, queue, lease_ms=LONG, count=10) == []
    for job in held:
        echomq.complete(conn, queue, job.id, job.token, "done")
    assert echomq.counts(conn, queue) == echomq.Counts(0, 0, 0, 2, 0)
    assert echomq.claim(conn, queue, lease_ms=LONG, count=10) == []
    assert not conn.redis.exists(keys.ring)
    # the queue works on: a new job is claimed as ever
    new = echomq.add(conn, queue, {"after": 1}, group="g1")
    assert [j.id for j in echomq.claim(conn, queue, lease_ms=LONG)] == [new]


def test_drain_keeps_scheduled_jobs_when_asked(conn: Connection, queue: str) -> None:
    ids = fill(conn, queue)
    assert echomq.drain(conn, queue, scheduled=False) == 8
    assert echomq.counts(conn, queue) == echomq.Counts(0, 2, 0, 0, 0)
    assert all(echomq.get_job(conn, queue, i) is not None for i in ids["later"])
    assert echomq.drain(conn, queue) == 2
    assert echomq.drain(conn, queue) == 0


def test_obliterate_refuses_while_jobs_are_active_and_changes_nothing(
    conn: Connection, queue: str,
) -> None:
    fill(conn, queue)
    [job] = echomq.claim(conn, queue, lease_ms=LONG)
    before = keys_of(conn, queue)
    with pytest.raises(echomq.QueueBusy, match="1 jobs are active"):
        echomq.obliterate(conn, queue)
    assert keys_of(conn, queue) == before
    echomq.add(conn, queue, {"still": "open"})  # not marked: adds go on
    assert echomq.claim(conn, queue, lease_ms=LONG)  # not paused
    echomq.complete(conn, queue, job.id, job.token)


def test_obliterate_refuses_unarchived_history_until_the_archive_folds_it(
    conn: Connection, queue: str, tmp_path: Path,
) -> None:
    declare(conn, queue)
    echomq.add_many(conn, queue, [1, 2, 3])
    for job in echomq.claim(conn, queue, lease_ms=LONG, count=3):
        echomq.complete(conn, queue, job.id, job.token)
    with pytest.raises(echomq.HistoryNotArchived, match="holds 3 entries") as caught:
        echomq.obliterate(conn, queue)
    assert isinstance(caught.value, echomq.QueueBusy)
    assert queue in declared_queues(conn)

    with Floor(tmp_path / "floor") as floor:
        report = Driver(conn, floor, claim_custody=True).fold(queue)  # folded, then trimmed
        assert (report.entries, report.trimmed) == (3, 3)
        assert len(floor.entries(queue)) == 3
    removed = echomq.obliterate(conn, queue)
    assert removed > 3  # three rows and the queue's own keys
    assert keys_of(conn, queue) == []
    assert queue not in conn.redis.smembers(conn.declared_set)


def test_obliterate_force_removes_every_key_orphans_included(
    conn: Connection, queue: str,
) -> None:
    declare(conn, queue)
    fill(conn, queue)
    echomq.set_group_limit(conn, queue, "g1", 3)
    held = echomq.claim(conn, queue, lease_ms=LONG, count=3)
    echomq.complete(conn, queue, held[0].id, held[0].token)  # a stream entry
    echomq.fail(conn, queue, held[1].id, held[1].token, "boom", retry=False)
    keys = conn.keys(queue)
    conn.redis.hset(keys.job("orphan"), mapping={"state": "pending"})  # in no set
    conn.redis.set(keys.base + "stray", "1")  # a key no release writes any more
    conn.redis.set(keys.archive_lease, "someone", px=LONG)
    found = keys_of(conn, queue)
    assert len(found) > 15

    removed = echomq.obliterate(conn, queue, force=True)

    assert removed == len(found)
    assert keys_of(conn, queue) == []
    assert queue not in conn.redis.smembers(conn.declared_set)
    # the held job's worker settles into nothing: its job is gone
    with pytest.raises(echomq.JobGone):
        echomq.complete(conn, queue, held[2].id, held[2].token)
    assert keys_of(conn, queue) == []
    # the name is free: a new queue starts empty and unpaused
    new = echomq.add(conn, queue, {"fresh": 1})
    assert echomq.counts(conn, queue) == echomq.Counts(1, 0, 0, 0, 0)
    assert [j.id for j in echomq.claim(conn, queue, lease_ms=LONG)] == [new]


@pytest.mark.parametrize("glob", ["*", "?", "[x]", "\\x", "[a-z]"])
def test_a_queue_named_with_glob_characters_takes_no_other_queue_with_it(
    conn: Connection, glob: str,
) -> None:
    tag = uuid.uuid4().hex[:8]
    victim, doomed = f"{tag}x", f"{tag}{glob}"
    for name in (victim, doomed):
        fill(conn, name)
    victim_keys = keys_of(conn, victim)

    echomq.obliterate(conn, doomed)

    assert keys_of(conn, doomed) == []
    assert keys_of(conn, victim) == victim_keys
    assert echomq.counts(conn, victim) == echomq.Counts(8, 2, 0, 0, 0)


def test_two_queues_side_by_side_only_the_named_one_goes(conn: Connection, queue: str) -> None:
    other = queue + "-other"
    fill(conn, queue)
    fill(conn, other)
    echomq.obliterate(conn, queue)
    assert keys_of(conn, queue) == []
    assert echomq.counts(conn, other) == echomq.Counts(8, 2, 0, 0, 0)
    # its plain jobs and one job of each group (a group runs one job at a time)
    assert len(echomq.claim(conn, other, lease_ms=LONG, count=10)) == 3 + 1 + 1


def test_while_obliterate_runs_adds_are_refused_and_claims_get_nothing(
    conn: Connection, queue: str,
) -> None:
    fill(conn, queue)
    steps = obliterate_batches(conn, queue)
    assert next(steps) == 0  # checked and marked; nothing removed yet
    with pytest.raises(echomq.QueueBusy, match="being obliterated"):
        echomq.add(conn, queue, {"late": 1})
    assert echomq.claim(conn, queue, lease_ms=LONG, count=10) == []
    next(steps)  # one batch gone, then interrupted: the queue stays paused and marked
    steps.close()
    assert echomq.claim(conn, queue, lease_ms=LONG, count=10) == []
    with pytest.raises(echomq.QueueBusy):
        echomq.add(conn, queue, {"late": 2})
    echomq.obliterate(conn, queue)  # obliterate again finishes the job
    assert keys_of(conn, queue) == []
    echomq.add(conn, queue, {"late": 3})
    assert echomq.counts(conn, queue).pending == 1


def test_resume_is_refused_on_a_half_obliterated_queue_until_the_obliterate_finishes(
    conn: Connection, queue: str,
) -> None:
    """Resumed midway, the queue handed out skeleton rows (ids whose rows were gone)."""
    echomq.add_many(conn, queue, [{"n": i} for i in range(BULK_BATCH + 200)])
    steps = obliterate_batches(conn, queue)
    assert next(steps) == 0 and next(steps) > 0  # marked, one batch gone...
    steps.close()  # ...then stopped: rows and set entries are half gone
    assert 0 < len(keys_of(conn, queue)) < BULK_BATCH
    with pytest.raises(echomq.QueueBusy, match=f"resume {queue!r}: .*being obliterated"):
        echomq.resume(conn, queue)
    assert echomq.is_paused(conn, queue)  # nothing changed
    assert echomq.claim(conn, queue, lease_ms=LONG, count=1000) == []

    echomq.obliterate(conn, queue)  # finishes the job
    assert keys_of(conn, queue) == []
    assert echomq.resume(conn, queue) is False  # a fresh, unpaused name: accepted
    job_id = echomq.add(conn, queue, {"new": 1})
    [job] = echomq.claim(conn, queue, lease_ms=LONG, count=10)
    assert (job.id, job.payload) == (job_id, {"new": 1})


def test_bad_names_are_refused_before_the_wire(conn: Connection) -> None:
    for verb in (echomq.drain, echomq.obliterate):
        with pytest.raises(echomq.InvalidKey):
            verb(conn, "a{b}")  # type: ignore[operator]


# -- batching: counted by the server ---------------------------------------------------


@pytest.fixture
def big(private_server: EmbeddedValkey, executor: str) -> Iterator[Connection]:
    """A server of the test's own (its command statistics are ours alone), 20,000 jobs:
    12,000 plain, 5,000 in 50 groups, 3,000 scheduled."""
    conn = echomq.connect(private_server.url, executor=executor)  # type: ignore[arg-type]
    queue = "big"
    for start in range(0, 12_000, 1000):
        echomq.add_many(conn, queue, list(range(start, start + 1000)))
    for g in range(50):
        echomq.add_many(conn, queue, list(range(100)), group=f"g{g}")
    for _ in range(3):
        echomq.add_many(conn, queue, list(range(1000)), delay_ms=LONG)
    assert echomq.counts(conn, queue) == echomq.Counts(17_000, 3000, 0, 0, 0)
    # load the scripts (a NOSCRIPT retry would count twice) on a queue of its own
    for verb in (echomq.drain, echomq.obliterate):
        echomq.add(conn, "warm", 1)
        verb(conn, "warm")
    yield conn
    conn.close()


def lua_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("evalsha", "eval", "fcall"))


@pytest.mark.slow
def test_a_drain_of_20000_jobs_removes_at_most_one_batch_per_lua_call(big: Connection) -> None:
    before = lua_calls(big.redis)
    batches = list(drain_batches(big, "big"))
    assert lua_calls(big.redis) - before == len(batches)  # one yield per Lua call
    assert sum(batches) == 20_000
    assert max(batches) <= BULK_BATCH and len(batches) >= 20
    assert echomq.counts(big, "big") == echomq.Counts(0, 0, 0, 0, 0)


@pytest.mark.slow
def test_an_obliterate_of_20000_jobs_deletes_at_most_one_batch_per_lua_call(
    big: Connection,
) -> None:
    total_keys = sum(1 for _ in big.redis.scan_iter(match="emq:{big}:*", count=1000))
    before = lua_calls(big.redis)
    batches = list(obliterate_batches(big, "big"))
    assert lua_calls(big.redis) - before == len(batches)
    assert sum(batches) == total_keys
    assert max(batches) <= BULK_BATCH and len(batches) >= 20
    assert big.redis.dbsize() == 0  # the warm-up queue went too: nothing is left


@pytest.mark.parametrize("batch", [1, 2, 3, 7, 10])
def test_small_batches_cut_anywhere_still_drain_everything(
    conn: Connection, queue: str, batch: int,
) -> None:
    echomq.add_many(conn, queue, list(range(4)))
    for g, size in enumerate([5, 1, 3, 7, 2]):
        echomq.add_many(conn, queue, list(range(size)), group=f"g{g}")
    echomq.add_many(conn, queue, list(range(3)), delay_ms=LONG)
    steps = list(drain_batches(conn, queue, batch=batch))
    assert sum(steps) == 4 + 18 + 3
    assert max(steps) <= batch
    assert echomq.counts(conn, queue) == echomq.Counts(0, 0, 0, 0, 0)
    assert not conn.redis.exists(conn.keys(queue).ring)
