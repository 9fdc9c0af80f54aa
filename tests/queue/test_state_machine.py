"""The states of DESIGN.md, arrow by arrow, on both executors; ordering, fencing, limits."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import echomq
from echomq.jobs.settle import complete_cancelled
from echomq.queue.keys import Keys
from echomq.servers.valkey import EmbeddedValkey
from tests.support.keyspace import dump
from tests.support.servers import closed_url
from tests.support.waits import server_ms, wait_lapsed, wait_until

LONG = 60_000
SHORT = 40
SETS = ("pending", "scheduled", "active", "completed", "dead", "waiting")


def state(conn: echomq.Connection, queue: str, job_id: str) -> str | None:
    job = echomq.get_job(conn, queue, job_id)
    return None if job is None else str(job.state)


def where(conn: echomq.Connection, queue: str, job_id: str) -> set[str]:
    """Which of the queue's sets and lanes hold ``job_id``."""
    keys = Keys(queue)
    found = {name for name in SETS if conn.redis.zscore(getattr(keys, name), job_id) is not None}
    for lane in conn.redis.scan_iter(match=keys.base + "lane:*"):
        if conn.redis.zscore(lane, job_id) is not None:
            found.add(lane.removeprefix(keys.base))
    return found


def job(conn: echomq.Connection, queue: str, job_id: str) -> echomq.Job:
    found = echomq.get_job(conn, queue, job_id)
    assert found is not None
    return found


def claim_ids(conn: echomq.Connection, queue: str, count: int = 1, lease: int = LONG) -> list[str]:
    return [j.id for j in echomq.claim(conn, queue, lease_ms=lease, count=count)]


# --- every arrow -------------------------------------------------------------------------


def test_pending_claim_active_complete_completed(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"to": "a@b"})
    assert state(conn, queue, job_id) == "pending" and where(conn, queue, job_id) == {"pending"}
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    assert (held.id, held.token, held.attempts, held.payload) == (job_id, 1, 1, {"to": "a@b"})
    assert state(conn, queue, job_id) == "active" and where(conn, queue, job_id) == {"active"}
    assert conn.redis.zscore(Keys(queue).active, job_id) == held.lease_deadline_ms
    echomq.complete(conn, queue, job_id, held.token, {"sent": True})
    row = job(conn, queue, job_id)
    assert row.state == "completed" and where(conn, queue, job_id) == {"completed"}
    assert row.result == {"sent": True}
    assert echomq.metrics(conn, queue)["completed"] == 1


def test_a_cancelled_job_is_a_completion_not_a_state(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    complete_cancelled(conn, queue, job_id, held.token, "operator")
    row = job(conn, queue, job_id)
    assert (row.state, row.result, row.cancel_reason) == ("completed", None, "operator")
    assert where(conn, queue, job_id) == {"completed"}
    assert {s.value for s in echomq.JobState} == set(SETS)  # no 'cancelled' on the wire


def test_fail_with_tries_left_schedules_and_a_due_job_turns_pending(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, priority=5, max_attempts=3)
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    assert echomq.fail(conn, queue, job_id, held.token, "boom", backoff_ms=30) == "retrying"
    row = job(conn, queue, job_id)
    assert (row.state, row.last_error) == ("scheduled", "boom")
    assert where(conn, queue, job_id) == {"scheduled"}
    due = conn.redis.zscore(Keys(queue).scheduled, job_id)
    assert due is not None
    # a more urgent job takes the claim; the due retry is promoted to pending beside it
    urgent = echomq.add(conn, queue, {"n": "urgent"})
    wait_until(lambda: server_ms(conn.redis) > due)
    assert claim_ids(conn, queue) == [urgent]
    assert state(conn, queue, job_id) == "pending" and where(conn, queue, job_id) == {"pending"}
    [again] = echomq.claim(conn, queue, lease_ms=LONG)
    assert (again.id, again.token) == (job_id, 2)


def test_fail_with_no_tries_left_is_dead(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, max_attempts=1)
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    assert echomq.fail(conn, queue, job_id, held.token, RuntimeError("no luck")) == "dead"
    row = job(conn, queue, job_id)
    assert row.state == "dead" and "RuntimeError: no luck" in (row.last_error or "")
    assert where(conn, queue, job_id) == {"dead"}
    assert echomq.dead_jobs(conn, queue) == [job_id]
    assert echomq.metrics(conn, queue)["dead"] == 1


def test_a_lapsed_lease_reaped_is_pending_without_a_count(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    [held] = echomq.claim(conn, queue, lease_ms=SHORT)
    assert echomq.reap(conn, queue) == []  # alive: the reap skips it
    wait_lapsed(conn.redis, queue, job_id)
    assert echomq.reap(conn, queue) == [job_id]
    row = job(conn, queue, job_id)
    assert (row.state, row.stalled, row.attempts) == ("pending", 0, held.token)
    assert where(conn, queue, job_id) == {"pending"}
    assert echomq.reap(conn, queue) == []


@pytest.mark.parametrize("delay_ms", [0, LONG])
def test_remove_takes_a_pending_or_scheduled_job_away(
    conn: echomq.Connection, queue: str, delay_ms: int
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, delay_ms=delay_ms)
    other = echomq.add(conn, queue, {"n": 2}, delay_ms=delay_ms)
    echomq.remove_job(conn, queue, job_id)
    assert echomq.get_job(conn, queue, job_id) is None
    assert where(conn, queue, job_id) == set()
    assert state(conn, queue, other) == ("pending" if delay_ms == 0 else "scheduled")
    with pytest.raises(echomq.JobGone):
        echomq.remove_job(conn, queue, job_id)


def test_remove_refuses_a_held_job(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, max_attempts=1)
    echomq.claim(conn, queue, lease_ms=LONG)
    before = dump(conn.redis, queue)
    with pytest.raises(echomq.NotRemovable):
        echomq.remove_job(conn, queue, job_id)
    assert dump(conn.redis, queue) == before


# --- fencing -------------------------------------------------------------------------------


@pytest.mark.parametrize("recovery", ["reap", "stalled"])
def test_the_old_holder_is_fenced_after_a_reclaim(
    conn: echomq.Connection, queue: str, recovery: str
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    [old] = echomq.claim(conn, queue, lease_ms=SHORT)
    wait_lapsed(conn.redis, queue, job_id)
    if recovery == "reap":
        assert echomq.reap(conn, queue) == [job_id]
    else:
        assert echomq.stalled_check(conn, queue, max_stalled=5).recovered == [job_id]
    [new] = echomq.claim(conn, queue, lease_ms=LONG)
    assert (new.id, new.token) == (job_id, old.token + 1)
    before = dump(conn.redis, queue)
    with pytest.raises(echomq.StaleToken):
        echomq.complete(conn, queue, job_id, old.token, "late")
    with pytest.raises(echomq.StaleToken):
        echomq.fail(conn, queue, job_id, old.token, "late")
    with pytest.raises(echomq.StaleToken):
        echomq.extend_lock(conn, queue, job_id, old.token, LONG)
    [released] = echomq.release_many(conn, queue, [(job_id, old.token)])
    assert isinstance(released, echomq.StaleToken)
    assert dump(conn.redis, queue) == before  # the stale holder changed nothing
    echomq.complete(conn, queue, job_id, new.token, "mine")
    assert job(conn, queue, job_id).result == "mine"


# --- ordering ------------------------------------------------------------------------------


def test_lower_priority_number_first_and_fifo_within_a_priority(
    conn: echomq.Connection, queue: str
) -> None:
    priorities = [5, 0, 3, 0, 5, 1, 1023, 0, 3]
    ids = [echomq.add(conn, queue, {"i": i}, priority=p) for i, p in enumerate(priorities)]
    expected = [ids[i] for i in sorted(range(len(ids)), key=lambda i: (priorities[i], i))]
    got = claim_ids(conn, queue, count=4) + claim_ids(conn, queue, count=10)
    assert got == expected


def test_add_many_keeps_its_order(conn: echomq.Connection, queue: str) -> None:
    ids = echomq.add_many(conn, queue, [{"i": i} for i in range(25)])
    assert len(set(ids)) == 25
    assert claim_ids(conn, queue, count=25) == ids


@pytest.mark.parametrize("recovery", ["reap", "stalled", "release"])
def test_a_recovered_job_goes_to_the_front(
    conn: echomq.Connection, queue: str, recovery: str
) -> None:
    first = echomq.add(conn, queue, {"n": "first"}, priority=7)
    [held] = echomq.claim(conn, queue, lease_ms=SHORT)
    waiting = [echomq.add(conn, queue, {"n": i}, priority=0) for i in range(3)]
    if recovery == "release":
        assert echomq.release_many(conn, queue, [(first, held.token)]) == [None]
    else:
        wait_lapsed(conn.redis, queue, first)
        if recovery == "reap":
            assert echomq.reap(conn, queue) == [first]
        else:
            assert echomq.stalled_check(conn, queue, max_stalled=2).recovered == [first]
    assert claim_ids(conn, queue, count=10) == [first, *waiting]


def test_a_delayed_job_is_scheduled_until_due(conn: echomq.Connection, queue: str) -> None:
    later = echomq.add(conn, queue, {"n": "later"}, delay_ms=LONG)
    assert state(conn, queue, later) == "scheduled" and where(conn, queue, later) == {"scheduled"}
    assert echomq.claim(conn, queue, lease_ms=LONG) == []
    assert echomq.counts(conn, queue).as_dict() == {
        "pending": 0, "scheduled": 1, "active": 0, "completed": 0, "dead": 0, "paused": False,
    }
    soon = echomq.add(conn, queue, {"n": "soon"}, delay_ms=50)
    due = conn.redis.zscore(Keys(queue).scheduled, soon)
    got = wait_until(lambda: echomq.claim(conn, queue, lease_ms=LONG))
    assert [j.id for j in got] == [soon]
    assert due is not None and job(conn, queue, soon).claimed_at >= due  # type: ignore[operator]
    assert state(conn, queue, later) == "scheduled"


def test_retries_back_off_exponentially_then_dead_letter(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, max_attempts=4)
    outcomes, delays = [], []
    for attempt in range(1, 5):
        [held] = wait_until(lambda: echomq.claim(conn, queue, lease_ms=LONG))
        assert (held.id, held.token) == (job_id, attempt)
        before = server_ms(conn.redis)
        outcome = echomq.fail(
            conn, queue, job_id, held.token, f"boom {attempt}", backoff_ms=20, backoff_cap_ms=60
        )
        after = server_ms(conn.redis)
        outcomes.append(outcome)
        if outcome == "retrying":
            due = conn.redis.zscore(Keys(queue).scheduled, job_id)
            assert due is not None
            delays.append((due - after, due - before))
    assert outcomes == ["retrying", "retrying", "retrying", "dead"]
    # base * 2^(tries - 1), capped at 60: 20, 40, 60
    for (low, high), expected in zip(delays, [20, 40, 60], strict=True):
        assert low <= expected <= high
    row = job(conn, queue, job_id)
    assert (row.state, row.attempts, row.last_error) == ("dead", 4, "boom 4")
    assert where(conn, queue, job_id) == {"dead"}
    assert echomq.metrics(conn, queue) == {"completed": 0, "cancelled": 0, "retried": 3,
                                          "dead": 1}


def test_a_released_job_is_not_counted_as_a_try(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, max_attempts=2)
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    assert echomq.release_many(conn, queue, [(job_id, held.token)]) == [None]
    [again] = echomq.claim(conn, queue, lease_ms=LONG)
    assert again.token == 2
    # two claims, one of them handed back: one try, so one is left
    assert echomq.fail(conn, queue, job_id, again.token, "once", backoff_ms=1) == "retrying"
    [third] = wait_until(lambda: echomq.claim(conn, queue, lease_ms=LONG))
    assert echomq.fail(conn, queue, job_id, third.token, "twice") == "dead"


# --- groups --------------------------------------------------------------------------------


def test_a_group_runs_one_at_a_time_by_default(conn: echomq.Connection, queue: str) -> None:
    ids = [echomq.add(conn, queue, {"i": i}, group="acct") for i in range(3)]
    [held] = echomq.claim(conn, queue, lease_ms=LONG, count=10)
    assert held.id == ids[0]
    assert echomq.claim(conn, queue, lease_ms=LONG, count=10) == []
    assert echomq.counts(conn, queue).pending == 2
    echomq.complete(conn, queue, held.id, held.token)
    assert claim_ids(conn, queue, count=10) == [ids[1]]


def test_set_group_limit_bounds_a_group(conn: echomq.Connection, queue: str) -> None:
    echomq.set_group_limit(conn, queue, "acct", 2)
    ids = [echomq.add(conn, queue, {"i": i}, group="acct") for i in range(4)]
    held = echomq.claim(conn, queue, lease_ms=LONG, count=10)
    assert [j.id for j in held] == ids[:2]
    assert claim_ids(conn, queue, count=10) == []
    echomq.complete(conn, queue, held[0].id, held[0].token)
    assert claim_ids(conn, queue, count=10) == ids[2:3]
    assert claim_ids(conn, queue, count=10) == []


def test_a_raised_group_limit_applies_at_the_next_claim(
    conn: echomq.Connection, queue: str
) -> None:
    ids = [echomq.add(conn, queue, {"i": i}, group="acct") for i in range(4)]
    assert claim_ids(conn, queue, count=10) == ids[:1]
    echomq.set_group_limit(conn, queue, "acct", 3)
    assert claim_ids(conn, queue, count=10) == ids[1:3]
    assert claim_ids(conn, queue, count=10) == []


def test_a_lowered_group_limit_is_respected(conn: echomq.Connection, queue: str) -> None:
    echomq.set_group_limit(conn, queue, "acct", 3)
    ids = [echomq.add(conn, queue, {"i": i}, group="acct") for i in range(4)]
    [held] = echomq.claim(conn, queue, lease_ms=LONG, count=1)
    echomq.set_group_limit(conn, queue, "acct", 1)
    assert claim_ids(conn, queue, count=10) == []
    echomq.complete(conn, queue, held.id, held.token)
    assert claim_ids(conn, queue, count=10) == ids[1:2]


def test_groups_take_turns_round_robin(conn: echomq.Connection, queue: str) -> None:
    for group in ("g1", "g2", "g3"):
        echomq.set_group_limit(conn, queue, group, 10)
    a = [echomq.add(conn, queue, {"a": i}, group="g1") for i in range(3)]
    b = [echomq.add(conn, queue, {"b": i}, group="g2") for i in range(3)]
    c = [echomq.add(conn, queue, {"c": i}, group="g3") for i in range(2)]
    got = claim_ids(conn, queue, count=4) + claim_ids(conn, queue, count=10)
    assert got == [a[0], b[0], c[0], a[1], b[1], c[1], a[2], b[2]]


def test_grouped_and_ungrouped_jobs_take_turns(conn: echomq.Connection, queue: str) -> None:
    plain = [echomq.add(conn, queue, {"p": i}) for i in range(3)]
    grouped = [echomq.add(conn, queue, {"g": i}, group="g") for i in range(3)]
    echomq.set_group_limit(conn, queue, "g", 5)
    got = claim_ids(conn, queue, count=6)
    assert got == [plain[0], grouped[0], plain[1], grouped[1], plain[2], grouped[2]]


def test_a_settled_grouped_job_frees_its_slot(conn: echomq.Connection, queue: str) -> None:
    ids = [echomq.add(conn, queue, {"i": i}, group="g", max_attempts=1) for i in range(3)]
    [first] = echomq.claim(conn, queue, lease_ms=LONG, count=5)
    assert echomq.fail(conn, queue, first.id, first.token, "x") == "dead"
    [second] = echomq.claim(conn, queue, lease_ms=LONG, count=5)
    assert second.id == ids[1]
    assert echomq.release_many(conn, queue, [(second.id, second.token)]) == [None]
    assert claim_ids(conn, queue, count=5) == [ids[1]]


# --- idempotency and gates -----------------------------------------------------------------


def test_an_idempotent_add_changes_nothing(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, {"v": 1}, job_id="order-17", priority=3)
    echomq.add(conn, queue, {"v": "x"}, job_id="other")
    before = dump(conn.redis, queue)
    again = echomq.add(
        conn, queue, {"v": 2}, job_id="order-17", priority=0, delay_ms=500, group="g",
        max_attempts=9, name="renamed",
    )
    assert again == job_id == "order-17"
    assert dump(conn.redis, queue) == before
    assert echomq.add_many(conn, queue, [{"v": 3}], job_ids=["order-17"]) == ["order-17"]
    assert dump(conn.redis, queue) == before
    assert job(conn, queue, job_id).payload == {"v": 1}
    # and it is idempotent in every state, not only while pending
    [held] = [j for j in echomq.claim(conn, queue, lease_ms=LONG, count=2) if j.id == job_id]
    echomq.complete(conn, queue, job_id, held.token)
    before = dump(conn.redis, queue)
    assert echomq.add(conn, queue, {"v": 4}, job_id="order-17") == "order-17"
    assert dump(conn.redis, queue) == before


BAD_LEASES: list[Any] = [0, -1, 1.5, True, False, "100", None, math.inf]


@pytest.fixture
def offline(executor: str) -> Iterator[echomq.Connection]:
    """A connection to a port nothing listens on: a gate that reaches the wire fails loudly."""
    conn = echomq.connect(closed_url(), executor=executor, check=False, payload_limit=64)  # type: ignore[arg-type]
    yield conn
    conn.close()


@pytest.mark.parametrize("lease", BAD_LEASES)
def test_bad_leases_are_refused_before_the_wire(offline: echomq.Connection, lease: Any) -> None:
    with pytest.raises(echomq.InvalidArgument, match="lease_ms"):
        echomq.claim(offline, "q", lease_ms=lease)
    with pytest.raises(echomq.InvalidArgument, match="lease_ms"):
        echomq.extend_lock(offline, "q", "1", 1, lease)


@pytest.mark.parametrize("count", [0, -3, 2.0, True, 1001])
def test_bad_counts_are_refused_before_the_wire(offline: echomq.Connection, count: Any) -> None:
    with pytest.raises(echomq.InvalidArgument, match="count"):
        echomq.claim(offline, "q", lease_ms=1000, count=count)


@pytest.mark.parametrize(
    "payload", [object(), {1, 2}, float("nan"), {"x": float("inf")}, b"bytes", "x" * 100]
)
def test_bad_payloads_are_refused_before_the_wire(
    offline: echomq.Connection, payload: Any
) -> None:
    with pytest.raises(echomq.InvalidArgument, match="payload"):
        echomq.add(offline, "q", payload)
    with pytest.raises(echomq.InvalidArgument, match="payload"):
        echomq.add_many(offline, "q", [{"fine": 1}, payload])


@pytest.mark.parametrize(
    "options",
    [
        {"priority": -1}, {"priority": 1024}, {"priority": 1.0}, {"delay_ms": -1},
        {"max_attempts": 0}, {"max_attempts": True}, {"name": 5},
    ],
)
def test_bad_add_options_are_refused_before_the_wire(
    offline: echomq.Connection, options: dict[str, Any]
) -> None:
    with pytest.raises(echomq.InvalidArgument):
        echomq.add(offline, "q", {"n": 1}, **options)


def test_bad_sweep_and_limit_arguments_are_refused_before_the_wire(
    offline: echomq.Connection,
) -> None:
    for kwargs in ({"max_stalled": 0}, {"limit": 0}, {"max_stalled": 1.5}, {"limit": True}):
        with pytest.raises(echomq.InvalidArgument):
            echomq.stalled_check(offline, "q", **kwargs)
    with pytest.raises(echomq.InvalidArgument):
        echomq.set_group_limit(offline, "q", "g", 0)
    with pytest.raises(echomq.InvalidArgument):
        echomq.fail(offline, "q", "1", 1, "x", backoff_ms=0)
    with pytest.raises(echomq.InvalidArgument):
        echomq.complete(offline, "q", "1", 1, result=object())
    with pytest.raises(echomq.ConnectionFailed):  # the fixture really is offline
        echomq.add(offline, "q", {"n": 1})


def test_a_payload_at_the_limit_is_accepted(server_url: str, executor: str, queue: str) -> None:
    conn = echomq.connect(server_url, executor=executor, payload_limit=64)  # type: ignore[arg-type]
    try:
        body = "x" * 62  # 64 bytes as JSON, quotes included
        job_id = echomq.add(conn, queue, body)
        assert job(conn, queue, job_id).payload == body
        with pytest.raises(echomq.InvalidArgument, match="65 bytes"):
            echomq.add(conn, queue, body + "x")
        assert echomq.counts(conn, queue).pending == 1
    finally:
        conn.close()


# --- one round trip per claim --------------------------------------------------------------


def counting_client(url: str) -> tuple[redis.Redis, list[str]]:
    sent: list[str] = []

    class Counting(redis.Connection):
        def send_command(self, *args: Any, **kwargs: Any) -> None:
            sent.append(str(args[0]).upper())
            super().send_command(*args, **kwargs)

    client = redis.Redis.from_url(url, decode_responses=True, connection_class=Counting)
    return client, sent


def command_calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if name not in ("cmdstat_info", "cmdstat_config")
    }


def test_claim_of_a_hundred_is_one_round_trip(
    private_server: EmbeddedValkey, executor: str, queue: str
) -> None:
    client, sent = counting_client(private_server.url)
    conn = echomq.Connection(client, url=private_server.url, executor=executor)  # type: ignore[arg-type]
    try:
        echomq.add_many(conn, queue, [{"i": i} for i in range(150)])
        echomq.claim(conn, queue, lease_ms=LONG, count=1)  # warm: script cached / library checked
        admin = redis.Redis.from_url(private_server.url, decode_responses=True)
        admin.config_resetstat()
        sent.clear()
        claimed = echomq.claim(conn, queue, lease_ms=LONG, count=100)
        assert len(claimed) == 100
        verb = "EVALSHA" if executor == "scripts" else "FCALL"
        assert sent == [verb]
        # the server agrees: one script call and no load (the counts of the commands the
        # script ran inside are in commandstats too, so only the entry points are compared)
        calls = command_calls(admin)
        entry_points = {"eval", "evalsha", "fcall", "script|load", "function|load"}
        assert {k: v for k, v in calls.items() if k in entry_points} == {verb.lower(): 1}
        # one read and one write per claimed job (the attempts bump rides the state's HSET),
        # all in that call, and one read of the queue's rate limits (none set) per call
        assert (calls["hmget"], calls["hset"], calls.get("hincrby", 0)) == (101, 100, 0)
        admin.close()
    finally:
        conn.close()
