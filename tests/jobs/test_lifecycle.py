"""The lifecycle controls of the seed: extend_lock's timeline, the stalled ladder, and
where the native twins (the functions executor) differ from the scripted ones.

Leases are compressed from the seed's 30 s to tens or hundreds of milliseconds; every
wait polls the server clock (the clock leases are scored on) with a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import echomq
from echomq.models import StalledSweep
from echomq.queue.keys import Keys
from echomq.servers.valkey import EmbeddedValkey
from tests.support.keyspace import dump
from tests.support.servers import closed_url, run_id
from tests.support.waits import server_ms, wait_lapsed, wait_until

LONG = 60_000
SHORT = 40


def job(conn: echomq.Connection, queue: str, job_id: str) -> echomq.Job:
    found = echomq.get_job(conn, queue, job_id)
    assert found is not None
    return found


def lease_of(conn: echomq.Connection, queue: str, job_id: str) -> float | None:
    return conn.redis.zscore(Keys(queue).active, job_id)


def claim_one(conn: echomq.Connection, queue: str, lease_ms: int) -> echomq.ClaimedJob:
    [held] = echomq.claim(conn, queue, lease_ms=lease_ms)
    return held


def lapsed_job(conn: echomq.Connection, queue: str, **add: Any) -> echomq.ClaimedJob:
    """A job claimed under a short lease whose holder went silent; the lease has lapsed."""
    echomq.add(conn, queue, {"n": 1}, **add)
    held = claim_one(conn, queue, SHORT)
    wait_lapsed(conn.redis, queue, held.id)
    return held


@pytest.fixture
def scripts(server_url: str) -> Iterator[echomq.Connection]:
    conn = echomq.connect(server_url, executor="scripts")
    yield conn
    conn.close()


@pytest.fixture
def functions(server_url: str) -> Iterator[echomq.Connection]:
    conn = echomq.connect(server_url, executor="functions")
    yield conn
    conn.close()


# --- the lease timeline: extend_lock ------------------------------------------------------


def test_an_alive_lease_is_re_scored_to_now_plus_the_lease(
    conn: echomq.Connection, queue: str
) -> None:
    echomq.add(conn, queue, {"n": 1})
    held = claim_one(conn, queue, LONG)
    for lease in (120_000, 5_000):  # a re-score, not a max: a shorter lease moves it earlier
        before = server_ms(conn.redis)
        assert echomq.extend_lock(conn, queue, held.id, held.token, lease) is None
        after = server_ms(conn.redis)
        score = lease_of(conn, queue, held.id)
        assert score is not None and before + lease <= score <= after + lease
    row = job(conn, queue, held.id)
    assert (row.state, row.attempts) == ("active", held.token)


def test_a_lapsed_lease_not_yet_collected_still_extends(
    conn: echomq.Connection, queue: str
) -> None:
    held = lapsed_job(conn, queue)
    echomq.extend_lock(conn, queue, held.id, held.token, LONG)
    # its deadline sits ahead of now again: a reap pass and the sweep both skip it
    assert echomq.reap(conn, queue) == []
    assert echomq.stalled_check(conn, queue) == StalledSweep([], [])
    assert job(conn, queue, held.id).state == "active"
    echomq.complete(conn, queue, held.id, held.token)


@pytest.mark.parametrize("collector", ["reap", "stalled"])
def test_a_collected_lease_never_comes_back(
    conn: echomq.Connection, queue: str, collector: str
) -> None:
    held = lapsed_job(conn, queue)
    if collector == "reap":
        assert echomq.reap(conn, queue) == [held.id]
        state = "pending"
    else:
        assert echomq.stalled_check(conn, queue).dead == [held.id]
        state = "dead"
    # the token still matches (nothing claimed it again), but the id left active
    assert job(conn, queue, held.id).attempts == held.token
    with pytest.raises(echomq.NotActive):
        echomq.extend_lock(conn, queue, held.id, held.token, LONG)
    assert lease_of(conn, queue, held.id) is None
    assert job(conn, queue, held.id).state == state


def test_a_stale_holder_may_not_extend(conn: echomq.Connection, queue: str) -> None:
    old = lapsed_job(conn, queue)
    echomq.reap(conn, queue)
    new = claim_one(conn, queue, LONG)
    assert new.token == old.token + 1
    deadline = lease_of(conn, queue, new.id)
    with pytest.raises(echomq.StaleToken, match="EMQSTALE"):
        echomq.extend_lock(conn, queue, old.id, old.token, LONG * 10)
    assert lease_of(conn, queue, new.id) == deadline  # the new holder's lease is untouched


def test_stale_is_answered_before_not_active(conn: echomq.Connection, queue: str) -> None:
    # the id is both stale and out of active: the token check comes first
    old = lapsed_job(conn, queue)
    echomq.reap(conn, queue)
    new = claim_one(conn, queue, LONG)
    echomq.complete(conn, queue, new.id, new.token)
    assert lease_of(conn, queue, old.id) is None
    with pytest.raises(echomq.StaleToken):
        echomq.extend_lock(conn, queue, old.id, old.token, LONG)
    with pytest.raises(echomq.NotActive):  # the current token, out of active
        echomq.extend_lock(conn, queue, new.id, new.token, LONG)


def test_a_missing_row_is_gone_whatever_the_token(conn: echomq.Connection, queue: str) -> None:
    with pytest.raises(echomq.JobGone):
        echomq.extend_lock(conn, queue, "never-added", 1, LONG)
    job_id = echomq.add(conn, queue, {"n": 1})
    echomq.remove_job(conn, queue, job_id)
    for token in (0, 1, 99):
        with pytest.raises(echomq.JobGone):
            echomq.extend_lock(conn, queue, job_id, token, LONG)
    assert dump(conn.redis, queue).get("active") is None  # nothing was resurrected


@pytest.mark.parametrize("lease", [0, -1, 1.5, True, "30000", None])
def test_extend_lock_refuses_a_lease_that_is_not_a_positive_int_before_the_wire(
    executor: str, lease: Any
) -> None:
    conn = echomq.connect(closed_url(), executor=executor, check=False)  # type: ignore[arg-type]
    try:
        with pytest.raises(echomq.InvalidArgument, match="lease_ms"):
            echomq.extend_lock(conn, "q", "1", 1, lease)
    finally:
        conn.close()


# --- the stalled ladder --------------------------------------------------------------------


def test_at_the_default_threshold_the_first_stall_dead_letters(
    conn: echomq.Connection, queue: str
) -> None:
    held = lapsed_job(conn, queue)
    other = echomq.add(conn, queue, {"n": "waiting"})
    assert echomq.stalled_check(conn, queue) == StalledSweep(recovered=[], dead=[held.id])
    row = job(conn, queue, held.id)
    assert (row.state, row.stalled, row.last_error) == ("dead", 1, "stalled")
    assert echomq.dead_jobs(conn, queue) == [held.id]
    assert lease_of(conn, queue, held.id) is None
    assert echomq.metrics(conn, queue)["dead"] == 1
    assert echomq.counts(conn, queue).as_dict() == {
        "pending": 1, "scheduled": 0, "active": 0, "completed": 0, "dead": 1, "paused": False,
    }
    assert job(conn, queue, other).state == "pending"


def test_below_the_threshold_a_stall_recovers_and_the_count_decides(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, {"n": "poison"})
    later = echomq.add(conn, queue, {"n": "later"})
    sweeps = []
    for _ in range(3):
        held = claim_one(conn, queue, SHORT)
        assert held.id == job_id  # a recovered job goes to the front
        wait_lapsed(conn.redis, queue, job_id)
        sweeps.append(echomq.stalled_check(conn, queue, max_stalled=3))
        if not sweeps[-1].dead:
            row = job(conn, queue, job_id)
            assert (row.state, row.stalled, row.last_error) == ("pending", len(sweeps), None)
    assert sweeps == [
        StalledSweep([job_id], []), StalledSweep([job_id], []), StalledSweep([], [job_id]),
    ]
    row = job(conn, queue, job_id)
    assert (row.state, row.stalled, row.attempts, row.last_error) == ("dead", 3, 3, "stalled")
    assert echomq.metrics(conn, queue)["dead"] == 1
    assert echomq.dead_jobs(conn, queue) == [job_id] and lease_of(conn, queue, job_id) is None
    assert echomq.counts(conn, queue).as_dict() == {  # in the dead set and nowhere else
        "pending": 1, "scheduled": 0, "active": 0, "completed": 0, "dead": 1, "paused": False,
    }
    assert [j.id for j in echomq.claim(conn, queue, lease_ms=LONG, count=5)] == [later]


def test_limit_bounds_one_pass(conn: echomq.Connection, queue: str) -> None:
    ids = echomq.add_many(conn, queue, [{"i": i} for i in range(5)])
    echomq.claim(conn, queue, lease_ms=SHORT, count=5)
    wait_lapsed(conn.redis, queue, *ids)
    passes = [echomq.stalled_check(conn, queue, max_stalled=5, limit=2) for _ in range(4)]
    assert [len(p.recovered) for p in passes] == [2, 2, 1, 0]
    assert sorted(i for p in passes for i in p.recovered) == sorted(ids)
    assert all(p.dead == [] for p in passes)


def test_by_default_one_pass_takes_at_most_a_hundred(
    conn: echomq.Connection, queue: str
) -> None:
    ids = echomq.add_many(conn, queue, [{"i": i} for i in range(101)])
    echomq.claim(conn, queue, lease_ms=SHORT, count=101)
    wait_lapsed(conn.redis, queue, *ids)
    first = echomq.stalled_check(conn, queue)  # the defaults: max_stalled 1, limit 100
    assert (len(first.recovered), len(first.dead)) == (0, 100)
    assert echomq.stalled_check(conn, queue).dead == sorted(set(ids) - set(first.dead))


def test_a_checkpointing_holder_is_never_swept(conn: echomq.Connection, queue: str) -> None:
    echomq.add(conn, queue, {"n": "long"})
    held = claim_one(conn, queue, 150)
    for _ in range(6):
        time.sleep(0.06)
        echomq.extend_lock(conn, queue, held.id, held.token, 150)
        assert echomq.stalled_check(conn, queue) == StalledSweep([], [])
        assert echomq.reap(conn, queue) == []
    assert job(conn, queue, held.id).stalled == 0
    echomq.complete(conn, queue, held.id, held.token)


def test_the_script_sweep_returns_a_grouped_job_to_its_lane(
    scripts: echomq.Connection, queue: str
) -> None:
    keys = Keys(queue)
    first = echomq.add(scripts, queue, {"n": 1}, group="acct")
    second = echomq.add(scripts, queue, {"n": 2}, group="acct")
    [held] = echomq.claim(scripts, queue, lease_ms=SHORT, count=5)  # group limit 1
    assert held.id == first
    assert scripts.redis.hget(keys.gactive, "acct") == "1"
    assert scripts.redis.lrange(keys.ring, 0, -1) == []
    wait_lapsed(scripts.redis, queue, first)
    assert echomq.stalled_check(scripts, queue, max_stalled=2) == StalledSweep([first], [])
    assert scripts.redis.hget(keys.gactive, "acct") is None  # the lane's slot is given back
    assert scripts.redis.zrange(keys.lane("acct"), 0, -1) == [first, second]
    assert scripts.redis.lrange(keys.ring, 0, -1) == ["acct"]
    assert scripts.redis.zscore(keys.pending, first) is None
    assert job(scripts, queue, first).state == "pending"
    assert [j.id for j in echomq.claim(scripts, queue, lease_ms=LONG, count=5)] == [first]


def test_a_grouped_dead_letter_frees_its_lane(scripts: echomq.Connection, queue: str) -> None:
    keys = Keys(queue)
    first = echomq.add(scripts, queue, {"n": 1}, group="acct")
    second = echomq.add(scripts, queue, {"n": 2}, group="acct")
    echomq.claim(scripts, queue, lease_ms=SHORT, count=5)
    wait_lapsed(scripts.redis, queue, first)
    assert echomq.stalled_check(scripts, queue) == StalledSweep([], [first])
    assert scripts.redis.hget(keys.gactive, "acct") is None
    assert scripts.redis.zrange(keys.lane("acct"), 0, -1) == [second]
    assert job(scripts, queue, first).state == "dead"
    # the rest of the lane runs on: the dead job does not hold its group's slot
    assert [j.id for j in echomq.claim(scripts, queue, lease_ms=LONG, count=5)] == [second]


# --- the native twin's differences ---------------------------------------------------------


def test_a_restart_is_not_a_stall_under_functions_but_counts_under_scripts(
    private_server: EmbeddedValkey,
) -> None:
    conns = {
        name: echomq.connect(private_server.url, executor=name)  # type: ignore[arg-type]
        for name in ("functions", "scripts")
    }
    try:
        held = {}
        for name, conn in conns.items():
            echomq.add(conn, name, {"n": 1})
            echomq.add(conn, name, {"n": "behind"})
            held[name] = claim_one(conn, name, 300)
        old_run = run_id(conns["scripts"].redis)
        assert job(conns["functions"], "functions", held["functions"].id).lease_epoch == old_run
        assert job(conns["scripts"], "scripts", held["scripts"].id).lease_epoch is None
        private_server.restart()  # mid-lease
        assert run_id(conns["scripts"].redis) != old_run
        for name, conn in conns.items():
            wait_lapsed(conn.redis, name, held[name].id)
        # functions: leased by an earlier run, so recovered without counting
        job_id = held["functions"].id
        sweep = echomq.stalled_check(conns["functions"], "functions", max_stalled=1)
        assert sweep == StalledSweep(recovered=[job_id], dead=[])
        row = job(conns["functions"], "functions", job_id)
        assert (row.state, row.stalled, row.last_error) == ("pending", 0, None)
        assert conns["functions"].redis.zrange(Keys("functions").pending, 0, 0) == [job_id]
        # scripts: the same lapse is a counted stall, dead at the default threshold
        job_id = held["scripts"].id
        sweep = echomq.stalled_check(conns["scripts"], "scripts", max_stalled=1)
        assert sweep == StalledSweep(recovered=[], dead=[job_id])
        row = job(conns["scripts"], "scripts", job_id)
        assert (row.state, row.stalled, row.last_error) == ("dead", 1, "stalled")
    finally:
        for conn in conns.values():
            conn.close()


def test_a_lease_without_an_epoch_is_exempt_under_functions(
    scripts: echomq.Connection, functions: echomq.Connection, queue: str
) -> None:
    held = lapsed_job(scripts, queue)  # claimed through scripts: no lease_epoch
    assert job(functions, queue, held.id).lease_epoch is None
    assert echomq.stalled_check(functions, queue) == StalledSweep([held.id], [])
    row = job(functions, queue, held.id)
    assert (row.state, row.stalled) == ("pending", 0)
    # a lease this server run stamped is counted: the exemption is the epoch, nothing else
    again = lapsed_job(functions, queue)
    assert again.id == held.id
    assert job(functions, queue, held.id).lease_epoch == run_id(
        functions.redis, functions.keys(queue).meta)
    assert echomq.stalled_check(functions, queue) == StalledSweep([], [held.id])
    assert job(functions, queue, held.id).stalled == 1


def test_an_epoch_from_another_run_is_exempt_under_functions(
    functions: echomq.Connection, queue: str
) -> None:
    held = lapsed_job(functions, queue)
    functions.redis.hset(Keys(queue).job(held.id), "lease_epoch", "0" * 40)
    assert echomq.stalled_check(functions, queue) == StalledSweep([held.id], [])
    assert job(functions, queue, held.id).stalled == 0


def test_an_extend_under_functions_stamps_this_run(
    scripts: echomq.Connection, functions: echomq.Connection, queue: str
) -> None:
    echomq.add(scripts, queue, {"n": 1})
    held = claim_one(scripts, queue, LONG)
    echomq.extend_lock(scripts, queue, held.id, held.token, LONG)
    assert job(scripts, queue, held.id).lease_epoch is None
    echomq.extend_lock(functions, queue, held.id, held.token, LONG)
    assert job(scripts, queue, held.id).lease_epoch == run_id(
        functions.redis, functions.keys(queue).meta)


def plant_ghost(conn: echomq.Connection, queue: str) -> str:
    """An active id with no row, its lease long lapsed."""
    conn.redis.zadd(Keys(queue).active, {"ghost": 1})
    return "ghost"


def test_a_ghost_is_only_removed_under_functions(
    functions: echomq.Connection, queue: str
) -> None:
    ghost = plant_ghost(functions, queue)
    bystander = echomq.add(functions, queue, {"n": 1})
    before = dump(functions.redis, queue)
    assert echomq.stalled_check(functions, queue) == StalledSweep([], [])
    after = dump(functions.redis, queue)
    assert "active" not in after and f"job:{ghost}" not in after
    before.pop("active")
    assert after == before  # nothing else written: no row, no dead set, no metric
    assert echomq.get_job(functions, queue, bystander) is not None


def test_a_ghost_becomes_a_dead_skeleton_under_scripts(
    scripts: echomq.Connection, queue: str
) -> None:
    ghost = plant_ghost(scripts, queue)
    assert echomq.stalled_check(scripts, queue) == StalledSweep([], [ghost])
    row = scripts.redis.hgetall(Keys(queue).job(ghost))
    assert row["stalled"] == "1" and row["state"] == "dead" and row["last_error"] == "stalled"
    assert "payload" not in row and "attempts" not in row  # a skeleton HINCRBY created
    assert echomq.dead_jobs(scripts, queue) == [ghost]
    assert echomq.metrics(scripts, queue)["dead"] == 1


def test_a_grouped_lapsed_row_refuses_the_whole_functions_sweep(
    functions: echomq.Connection, scripts: echomq.Connection, queue: str
) -> None:
    plain = echomq.add(functions, queue, {"n": "plain"})
    grouped = echomq.add(functions, queue, {"n": "grouped"}, group="acct")
    held = echomq.claim(functions, queue, lease_ms=SHORT, count=5)
    assert sorted(j.id for j in held) == sorted([plain, grouped])
    wait_lapsed(functions.redis, queue, plain, grouped)
    before = dump(functions.redis, queue)
    with pytest.raises(echomq.LaneNotNative, match="^EMQSTATE stalled lane not native$"):
        echomq.stalled_check(functions, queue)
    assert dump(functions.redis, queue) == before  # even the plain lapsed id is untouched
    # the scripted sweep takes both
    assert sorted(echomq.stalled_check(scripts, queue, max_stalled=2).recovered) == sorted(
        [plain, grouped]
    )


@pytest.mark.plain_only  # sends two queues' keys in one call on purpose, to see the
# library refuse them; a Cluster client refuses such a call before the wire (CROSSSLOT)
def test_the_functions_executor_validates_before_the_first_write(
    functions: echomq.Connection, queue: str
) -> None:
    keys = Keys(queue)
    held = lapsed_job(functions, queue)  # a sweep would write if it ran
    other = Keys(queue + "-other")
    before = dump(functions.redis, queue)
    run = functions.executor.run

    extend_keys = [keys.active, keys.job(held.id)]
    for lease in ("0", "-5", "abc", "1.5", "", "10e3"):
        with pytest.raises(
            echomq.InvalidArgument, match="^EMQ.EXTEND lease_ms must be a positive integer$"
        ):
            run("extend_lock", extend_keys, [held.id, held.token, lease])
    sweep_keys = [keys.active, keys.pending, keys.dead]
    for max_stalled, limit, what in (("0", "1", "max_stalled"), ("-1", "1", "max_stalled"),
                                     ("x", "1", "max_stalled"), ("1", "0", "limit"),
                                     ("1", "2.5", "limit")):
        with pytest.raises(
            echomq.InvalidArgument,
            match=f"^EMQ.STALLED.CHECK {what} must be a positive integer$",
        ):
            run("stalled_check", sweep_keys, [keys.base, max_stalled, limit])

    bad_extend_keys = [
        [keys.active, keys.job("another")],
        [other.active, keys.job(held.id)],
        [keys.pending, keys.job(held.id)],
        [keys.active, other.job(held.id)],
    ]
    for bad in bad_extend_keys:
        with pytest.raises(echomq.InvalidKey, match="EMQ.EXTEND keys do not match"):
            run("extend_lock", bad, [held.id, held.token, "1000"])
    bad_sweeps = [
        ([keys.active, keys.pending, other.dead], keys.base),
        ([other.active, other.pending, other.dead], keys.base),
        ([keys.pending, keys.active, keys.dead], keys.base),
        ([keys.active, keys.pending, keys.dead], other.base),
        ([keys.active, keys.pending, keys.dead], "emq:"),
    ]
    for bad, base in bad_sweeps:
        with pytest.raises(echomq.InvalidKey, match="EMQ.STALLED.CHECK keys do not match"):
            run("stalled_check", bad, [base, "1", "10"])
    assert dump(functions.redis, queue) == before
    assert echomq.stalled_check(functions, queue) == StalledSweep([], [held.id])


def test_the_script_accepts_what_the_native_twin_refuses(
    scripts: echomq.Connection, queue: str
) -> None:
    # the seed: only the host-side guard checks the lease; the script runs tonumber
    keys = Keys(queue)
    echomq.add(scripts, queue, {"n": 1})
    held = claim_one(scripts, queue, LONG)
    before = server_ms(scripts.redis)
    assert scripts.executor.run(
        "extend_lock", [keys.active, keys.job(held.id)], [held.id, held.token, "-5000"]
    ) == 1
    score = lease_of(scripts, queue, held.id)
    assert score is not None and score < before  # re-scored into the past
    assert echomq.stalled_check(scripts, queue) == StalledSweep([], [held.id])


# --- the seed's worked example, at a compressed time scale --------------------------------


def test_the_worked_example(
    server_url: str, executor: str, queue: str, scripts: echomq.Connection
) -> None:
    """A worker claims a job with a 300 ms lease, runs for 900 ms and checkpoints every
    100 ms; sweeps run every 50 ms. A second worker claims another job and crashes. The
    first is never touched; the second is dead-lettered with last_error "stalled"."""
    worker = echomq.connect(server_url, executor=executor)  # type: ignore[arg-type]
    sweeper = echomq.connect(server_url, executor=executor)  # type: ignore[arg-type]
    sweeps: list[StalledSweep] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def sweep_forever() -> None:
        try:
            while not stop.is_set():
                sweeps.append(echomq.stalled_check(sweeper, queue))
                stop.wait(0.05)
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    try:
        long_id = echomq.add(worker, queue, {"n": "long"})
        crash_id = echomq.add(worker, queue, {"n": "crash"})
        held = claim_one(worker, queue, 300)
        crashed = claim_one(worker, queue, 300)
        assert (held.id, crashed.id) == (long_id, crash_id)
        thread = threading.Thread(target=sweep_forever, daemon=True)
        thread.start()
        started = time.monotonic()
        while time.monotonic() - started < 0.9:
            time.sleep(0.1)
            echomq.extend_lock(worker, queue, held.id, held.token, 300)
        wait_until(lambda: job(worker, queue, crash_id).state == "dead", timeout=5)
        stop.set()
        thread.join(5)
        assert not errors
        echomq.complete(worker, queue, held.id, held.token, "done")
    finally:
        stop.set()
        worker.close()
        sweeper.close()
    touched = [i for s in sweeps for i in s.recovered + s.dead]
    assert touched == [crash_id]  # dead-lettered once, never recovered; the long job untouched
    assert len(sweeps) > 5  # the sweeper really ran throughout
    row = job(scripts, queue, crash_id)
    assert (row.state, row.stalled, row.last_error) == ("dead", 1, "stalled")
    assert echomq.dead_jobs(scripts, queue) == [crash_id]
    done = job(scripts, queue, long_id)
    assert (done.state, done.stalled, done.result) == ("completed", 0, "done")
