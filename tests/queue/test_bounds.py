"""Bounds checked before the wire: one upper bound on every duration and count, identical
on both executors (the native twins check the same bound), and a payload depth limit.

Every refusal is tried on a connection to a closed port: an ``InvalidArgument`` there
proves nothing reached the wire (a call that did would raise ``ConnectionFailed``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

import pytest

import echomq
from echomq.jobs import stalled
from echomq.jobs.settle import Settlement
from echomq.models import StalledSweep
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys
from echomq.scheduling.scheduler import BatchScheduler
from echomq.worker.consumer import Consumer
from tests.support.keyspace import dump
from tests.support.servers import closed_url
from tests.support.waits import server_ms, wait_lapsed

MAX_INT = 2**41
"""The documented bound on every duration (ms) and count: about 69.7 years in ms."""
MAX_PAYLOAD_DEPTH = 256
"""The documented deepest nesting of a payload."""

Verb = Callable[[Connection, int], Any]


def _consumer(**options: Any) -> Verb:
    return lambda c, v: Consumer(c, "q", lambda job: None, **{k: v for k in options})


def _sweep(**options: Any) -> Verb:
    return lambda c, v: BatchScheduler(c).add_sweep("q", **{k: v for k in options})


VERBS: dict[str, Verb] = {
    "add delay_ms": lambda c, v: echomq.add(c, "q", {}, delay_ms=v),
    "add max_attempts": lambda c, v: echomq.add(c, "q", {}, max_attempts=v),
    "add_many delay_ms": lambda c, v: echomq.add_many(c, "q", [{}], delay_ms=v),
    "add_many max_attempts": lambda c, v: echomq.add_many(c, "q", [{}], max_attempts=v),
    "claim lease_ms": lambda c, v: echomq.claim(c, "q", lease_ms=v),
    "claim count": lambda c, v: echomq.claim(c, "q", count=v),
    "extend_lock lease_ms": lambda c, v: echomq.extend_lock(c, "q", "1", 1, v),
    "stalled_check max_stalled": lambda c, v: echomq.stalled_check(c, "q", max_stalled=v),
    "stalled_check limit": lambda c, v: echomq.stalled_check(c, "q", limit=v),
    "sweep_stalled max_stalled": lambda c, v: stalled.sweep_stalled(c, "q", max_stalled=v),
    "sweep_stalled limit": lambda c, v: stalled.sweep_stalled(c, "q", limit=v),
    "fail backoff_ms": lambda c, v: echomq.fail(c, "q", "1", 1, "x", backoff_ms=v),
    "fail backoff_cap_ms": lambda c, v: echomq.fail(c, "q", "1", 1, "x", backoff_cap_ms=v),
    "dead_jobs limit": lambda c, v: echomq.dead_jobs(c, "q", limit=v),
    "purge keep": lambda c, v: echomq.purge(c, "q", "dead", keep=v),
    "purge older_than_ms": lambda c, v: echomq.purge(c, "q", "dead", older_than_ms=v),
    "set_retention completed_age_ms": lambda c, v: echomq.set_retention(
        c, "q", completed_age_ms=v),
    "set_retention completed_count": lambda c, v: echomq.set_retention(
        c, "q", completed_count=v),
    "set_retention dead_age_ms": lambda c, v: echomq.set_retention(c, "q", dead_age_ms=v),
    "set_retention dead_count": lambda c, v: echomq.set_retention(c, "q", dead_count=v),
    "set_group_limit limit": lambda c, v: echomq.set_group_limit(c, "q", "g", v),
    "complete keep": lambda c, v: echomq.complete(c, "q", "1", 1, None, keep=v),
    "complete_many keep": lambda c, v: echomq.complete_many(
        c, "q", [Settlement("1", 1, "completed", "null")], keep=v),
    "Consumer keep_completed": _consumer(keep_completed=1),
    "Consumer result_limit": _consumer(result_limit=1),
    "Consumer lease_ms": _consumer(lease_ms=1),
    "Consumer max_stalled": _consumer(max_stalled=1),
    "Consumer beat_ms": _consumer(beat_ms=1),
    "Consumer concurrency": _consumer(concurrency=1),
    "Consumer batch_size": _consumer(batch_size=1),
    "Consumer prefetch": _consumer(prefetch=1),
    "Consumer poll_ms": _consumer(poll_ms=1),
    "Consumer shutdown_grace_ms": _consumer(shutdown_grace_ms=1),
    "Consumer backoff_ms": _consumer(backoff_ms=1),
    "Consumer backoff_cap_ms": _consumer(backoff_cap_ms=1),
    "BatchScheduler sweep interval_ms": _sweep(interval_ms=1),
    "BatchScheduler sweep max_stalled": _sweep(max_stalled=1),
    "BatchScheduler sweep limit": _sweep(limit=1),
    "BatchScheduler fold interval_ms": lambda c, v: BatchScheduler(c).add_fold(
        lambda: None, interval_ms=v),
    "BatchScheduler retention interval_ms": lambda c, v: BatchScheduler(c).add_retention(
        interval_ms=v),
}


@pytest.fixture
def offline(executor: str) -> Iterator[Connection]:
    """A connection whose server is not there: anything reaching the wire fails."""
    conn = echomq.connect(closed_url(), executor=executor, check=False)  # type: ignore[arg-type]
    yield conn
    conn.close()


@pytest.mark.parametrize("value", [MAX_INT + 1, 10**16, 10**20])
@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_duration_and_count_has_one_upper_bound_checked_before_the_wire(
    offline: Connection, verb: str, value: int
) -> None:
    with pytest.raises(echomq.InvalidArgument, match="must be at most"):
        VERBS[verb](offline, value)


@pytest.mark.parametrize("keep", [1.5, -2, True, "3"])
def test_a_retention_count_is_minus_one_or_a_count(offline: Connection, keep: object) -> None:
    with pytest.raises(echomq.InvalidArgument, match="keep"):
        echomq.complete(offline, "q", "1", 1, None, keep=keep)  # type: ignore[arg-type]
    with pytest.raises(echomq.InvalidArgument, match="keep_completed"):
        Consumer(offline, "q", lambda job: None, keep_completed=keep)  # type: ignore[arg-type]


# --- at the bound, on a real server: accepted, and every score stays exact ----------------


def test_a_lease_at_the_bound_is_an_exact_future_deadline(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {})
    before = server_ms(conn.redis)
    [held] = echomq.claim(conn, queue, lease_ms=MAX_INT)
    after = server_ms(conn.redis)
    assert before + MAX_INT <= held.lease_deadline_ms <= after + MAX_INT
    assert conn.redis.zscore(Keys(queue).active, held.id) == held.lease_deadline_ms
    before = server_ms(conn.redis)
    echomq.extend_lock(conn, queue, held.id, held.token, MAX_INT)
    score = conn.redis.zscore(Keys(queue).active, held.id)
    assert score is not None and score == int(score)
    assert before + MAX_INT <= score <= server_ms(conn.redis) + MAX_INT


def test_a_delay_at_the_bound_schedules_an_exact_time(conn: Connection, queue: str) -> None:
    before = server_ms(conn.redis)
    job_id = echomq.add(conn, queue, {}, delay_ms=MAX_INT)
    score = conn.redis.zscore(Keys(queue).scheduled, job_id)
    assert score is not None and before + MAX_INT <= score <= server_ms(conn.redis) + MAX_INT


def test_a_sweep_at_the_bound_runs(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {})
    [held] = echomq.claim(conn, queue, lease_ms=30)
    wait_lapsed(conn.redis, queue, held.id)
    swept = echomq.stalled_check(conn, queue, max_stalled=MAX_INT, limit=MAX_INT)
    assert swept == StalledSweep([held.id], [])
    assert echomq.dead_jobs(conn, queue, limit=MAX_INT) == []


def test_the_reported_out_of_range_calls_are_refused_and_change_nothing(
    conn: Connection, queue: str
) -> None:
    echomq.add_many(conn, queue, [{"n": 1}, {"n": 2}])
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    before = dump(conn.redis, queue)
    with pytest.raises(echomq.InvalidArgument, match="lease_ms must be at most"):
        echomq.extend_lock(conn, queue, held.id, held.token, 10**16)
    with pytest.raises(echomq.InvalidArgument, match="lease_ms must be at most"):
        echomq.claim(conn, queue, lease_ms=10**16)
    with pytest.raises(echomq.InvalidArgument, match="limit must be at most"):
        echomq.stalled_check(conn, queue, limit=10**20)
    assert dump(conn.redis, queue) == before


# --- the native twins check the same bound -----------------------------------------------


@pytest.fixture
def functions(server_url: str) -> Iterator[Connection]:
    conn = echomq.connect(server_url, executor="functions")
    yield conn
    conn.close()


def test_a_direct_fcall_gets_the_same_bound_as_the_python_gate(
    functions: Connection, queue: str
) -> None:
    keys = Keys(queue)
    echomq.add(functions, queue, {})
    [held] = echomq.claim(functions, queue, lease_ms=60_000)
    run = functions.executor.run
    extend_keys = [keys.active, keys.job(held.id)]
    sweep_keys = [keys.active, keys.pending, keys.dead]
    before = dump(functions.redis, queue)
    for huge in (str(MAX_INT + 1), str(10**16), "9" * 400):
        with pytest.raises(echomq.InvalidArgument,
                           match=f"^EMQ.EXTEND lease_ms must be at most {MAX_INT}$"):
            run("extend_lock", extend_keys, [held.id, held.token, huge])
        for args, what in (([huge, "1"], "max_stalled"), (["1", huge], "limit")):
            with pytest.raises(echomq.InvalidArgument,
                               match=f"^EMQ.STALLED.CHECK {what} must be at most {MAX_INT}$"):
                run("stalled_check", sweep_keys, [keys.base, *args])
    assert dump(functions.redis, queue) == before  # refused before the first write
    # the bound itself is accepted natively, as the Python gate accepts it
    assert run("extend_lock", extend_keys, [held.id, held.token, str(MAX_INT)]) == 1
    assert run("stalled_check", sweep_keys, [keys.base, str(MAX_INT), str(MAX_INT)]) == [[], []]


def test_the_documented_bounds_are_the_gates() -> None:
    assert (validate.MAX_INT, validate.MAX_PAYLOAD_DEPTH) == (MAX_INT, MAX_PAYLOAD_DEPTH)


def test_the_lua_bound_is_the_python_bound() -> None:
    folder = resources.files("echomq.queue").joinpath("lua")
    lib = folder.joinpath("_lib.lua").read_text(encoding="utf-8")
    [declared] = re.findall(r"local EMQ_MAX_INT = (\d+)", lib)
    assert int(declared) == MAX_INT
    stated = [
        int(n)
        for entry in folder.iterdir() if entry.name.endswith(".lua")
        for n in re.findall(r"must be at most (\d+)", entry.read_text(encoding="utf-8"))
    ]
    assert len(stated) >= 3 and set(stated) == {MAX_INT}


# --- payload depth ---------------------------------------------------------------------------


def nested(depth: int, kind: str = "list") -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_a_payload_nested_too_deep_is_refused_like_any_bad_payload(
    conn: Connection, queue: str, kind: str
) -> None:
    deep = nested(5000, kind)
    with pytest.raises(echomq.InvalidArgument, match="nested too deep"):
        echomq.add(conn, queue, deep)
    with pytest.raises(echomq.InvalidArgument, match="nested too deep"):
        echomq.add_many(conn, queue, [{"fine": 1}, deep])
    with pytest.raises(echomq.InvalidArgument, match=f"the limit is {MAX_PAYLOAD_DEPTH}"):
        echomq.add(conn, queue, nested(MAX_PAYLOAD_DEPTH + 1, kind))
    assert echomq.counts(conn, queue).as_dict() == {
        "pending": 0, "scheduled": 0, "active": 0, "completed": 0, "dead": 0, "paused": False}


def test_a_payload_at_the_depth_limit_round_trips(conn: Connection, queue: str) -> None:
    deep = nested(MAX_PAYLOAD_DEPTH)
    brackets = {"text": "[{" * 5000 + '\\"]}"[', "list": [[["x"]]]}  # strings do not nest
    ids = echomq.add_many(conn, queue, [deep, brackets])
    claimed = echomq.claim(conn, queue, lease_ms=60_000, count=2)
    assert [j.id for j in claimed] == ids
    assert [j.payload for j in claimed] == [deep, brackets]


@pytest.mark.parametrize("payload", [
    {"i": 1}, [1, 2.5, None, True], "é ü 漢字 😀", {"a": {"b": ["x", {"c": -0.0}]}}, 10**30,
    {"k": "\u0000\n\t\"\\"}, [],
])
def test_a_payload_is_stored_as_compact_ascii_json_its_size_in_bytes(payload: object) -> None:
    """The stored text is ``json.dumps`` compact with ``ensure_ascii``; the limit counts
    its bytes, which are its characters."""
    import json

    from echomq.queue.validate import payload_json

    text = payload_json(payload, 10_000)
    assert text == json.dumps(payload, separators=(",", ":"), allow_nan=False)
    assert len(text.encode()) == len(text)
    with pytest.raises(echomq.InvalidArgument, match=f"payload is {len(text)} bytes"):
        payload_json(payload, len(text) - 1)
    for bad in (float("nan"), {1j: 2}, object()):
        with pytest.raises(echomq.InvalidArgument, match="not JSON-serialisable"):
            payload_json(bad, 10_000)
