"""Every failed attempt keeps its own error, and a retry's delay can be given or jittered.

fail-3.lua appends each attempt's error (type, message, traceback, with the server's time
and the attempt) to the row's ``errors``, the last 10 kept, each traceback its last 8 KiB;
``delay_ms`` replaces the backoff and ``jitter`` spreads it (full jitter). Both executors.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import echomq
from echomq.jobs.texts import attempt_error
from echomq.queue.transitions import settles
from tests.support.waits import server_ms

LONG = 60_000


def caught(message: str) -> ValueError:
    """``ValueError(message)`` raised from a cause with a long message: a traceback of
    more than 8 KiB ending with ``message``."""
    try:
        try:
            raise RuntimeError("c" * 9000)
        except RuntimeError as cause:
            raise ValueError(message) from cause
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


def errors_of(conn: echomq.Connection, queue: str, job_id: str) -> list[dict[str, Any]]:
    text = conn.redis.hget(conn.keys(queue).job(job_id), "errors")
    return json.loads(text) if text else []


def claim_one(conn: echomq.Connection, queue: str) -> echomq.ClaimedJob:
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    return held


def test_each_attempt_keeps_its_error_the_last_ten_in_order(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, max_attempts=12)
    before = server_ms(conn.redis)
    verdicts = []
    for attempt in range(1, 13):
        held = claim_one(conn, queue)
        assert held.token == attempt
        exc = caught(f"attempt {attempt} " + "x" * 300)
        verdicts.append(echomq.fail(conn, queue, job_id, held.token, exc, delay_ms=0))
    assert verdicts == ["retrying"] * 11 + ["dead"]
    kept = errors_of(conn, queue, job_id)
    assert [e["attempt"] for e in kept] == list(range(3, 13))  # newest last, 10 kept
    after = server_ms(conn.redis)
    for entry in kept:
        assert set(entry) == {"at", "attempt", "type", "message", "traceback"}
        assert entry["type"] == "ValueError"
        assert entry["message"].startswith(f"attempt {entry['attempt']} ")
        assert before <= entry["at"] <= after
        trace = entry["traceback"]
        assert 8000 < len(trace.encode()) <= 8192  # the last 8 KiB of a longer one
        assert trace.endswith(f"ValueError: {entry['message']}\n")
    assert [e["at"] for e in kept] == sorted(e["at"] for e in kept)
    row = echomq.get_job(conn, queue, job_id)
    assert row is not None and row.last_error is not None
    assert row.last_error.startswith("ValueError: attempt 12 ")  # last_error as before


def test_a_string_error_is_kept_as_its_message(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, 1)
    held = claim_one(conn, queue)
    echomq.fail(conn, queue, job_id, held.token, "upstream said no", delay_ms=0)
    [entry] = errors_of(conn, queue, job_id)
    assert (entry["type"], entry["message"], entry["traceback"], entry["attempt"]) == (
        "", "upstream said no", "", 1)


def test_attempt_error_keeps_the_type_message_and_traceback_tail() -> None:
    class Odd(Exception):
        def __str__(self) -> str:
            return "caf\u00e9 \udc80"  # a lone surrogate: no UTF-8 byte, sent as its escape

    try:
        raise Odd()
    except Odd as exc:
        entry = json.loads(attempt_error(exc, limit=64))
    assert entry["type"].endswith("Odd") and "." in entry["type"]  # its qualified name
    assert entry["message"] == "caf\u00e9 \\udc80"
    assert len(entry["traceback"].encode()) <= 64
    assert entry["traceback"].endswith("\\udc80\n")


def test_a_given_delay_replaces_the_backoff(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, 1, max_attempts=5)
    held = claim_one(conn, queue)
    before = server_ms(conn.redis)
    assert echomq.fail(conn, queue, job_id, held.token, "later", delay_ms=7_000,
                       backoff_ms=3_600_000) == "retrying"
    after = server_ms(conn.redis)
    score = conn.redis.zscore(conn.keys(queue).scheduled, job_id)
    assert score is not None and before + 7_000 <= score <= after + 7_000


@pytest.mark.parametrize("jitter", [0.0, 0.25, 1.0])
def test_jitter_scales_the_backoff_within_its_bounds(
    conn: echomq.Connection, queue: str, jitter: float
) -> None:
    job_id = echomq.add(conn, queue, 1, max_attempts=5)
    held = claim_one(conn, queue)
    before = server_ms(conn.redis)
    call = settles.fail_call(conn.keys(queue), job_id, held.token, "boom",
                                 backoff_ms=10_000, backoff_cap_ms=60_000, jitter=jitter)
    assert settles.failed(conn.executor.run(*call), job_id) == "retrying"
    after = server_ms(conn.redis)
    score = conn.redis.zscore(conn.keys(queue).scheduled, job_id)
    spread = int(10_000 * jitter)
    assert score is not None and before + spread <= score <= after + spread
    assert before <= score <= after + 10_000  # within [now, now + backoff]


def test_a_delay_wins_over_jitter(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, 1, max_attempts=5)
    held = claim_one(conn, queue)
    before = server_ms(conn.redis)
    call = settles.fail_call(conn.keys(queue), job_id, held.token, "boom",
                                 backoff_ms=10_000, backoff_cap_ms=60_000, jitter=0.0,
                                 delay_ms=4_000)
    conn.executor.run(*call)
    score = conn.redis.zscore(conn.keys(queue).scheduled, job_id)
    assert score is not None and before + 4_000 <= score <= server_ms(conn.redis) + 4_000


@pytest.mark.parametrize("options", [
    {"jitter": 1.5}, {"jitter": -0.1}, {"jitter": float("nan")}, {"jitter": True},
    {"delay_ms": -1}, {"delay_ms": 1.5}, {"error_entry": "[1]"}, {"error_entry": "{"},
])
def test_bad_retry_options_are_refused_before_the_wire(
    conn: echomq.Connection, queue: str, options: dict[str, Any]
) -> None:
    job_id = echomq.add(conn, queue, 1)
    held = claim_one(conn, queue)
    with pytest.raises(echomq.InvalidArgument):
        settles.fail_call(conn.keys(queue), job_id, held.token, "boom", backoff_ms=1,
                              backoff_cap_ms=1, **options)
    with pytest.raises(echomq.InvalidArgument):
        echomq.fail(conn, queue, job_id, held.token, "boom", delay_ms=-5)
    row = echomq.get_job(conn, queue, job_id)
    assert row is not None and row.state == "active"


def test_a_malformed_error_entry_is_refused_by_the_script_with_nothing_written(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, 1)
    held = claim_one(conn, queue)
    keys = conn.keys(queue)
    bad = ("fail", [keys.active, keys.scheduled, keys.dead],
           [keys.base, job_id, held.token, "boom", 1, 1, "0", "0", "", "", "not json"])
    with pytest.raises(echomq.InvalidArgument, match="error entry"):
        conn.executor.run(*bad)
    row = echomq.get_job(conn, queue, job_id)
    assert row is not None and row.state == "active" and "errors" not in row.raw


def test_an_error_entry_is_kept_flat(conn: echomq.Connection, queue: str) -> None:
    """A nested value in an entry another client sends is dropped: each error stays one
    flat object, which is what keeps the row's array cheap to append to and trim."""
    job_id = echomq.add(conn, queue, 1, max_attempts=12)
    for attempt in range(1, 13):
        held = claim_one(conn, queue)
        entry = json.dumps({"type": "E", "message": f"m{attempt}", "traceback": "},{\"",
                            "extra": [{"a": 1}, {"b": 2}], "more": {"c": {}}})
        call = settles.fail_call(conn.keys(queue), job_id, held.token, "e", backoff_ms=1,
                                     backoff_cap_ms=1, delay_ms=0, error_entry=entry)
        conn.executor.run(*call)
    kept = errors_of(conn, queue, job_id)
    assert [e["message"] for e in kept] == [f"m{n}" for n in range(3, 13)]
    assert all(set(e) == {"at", "attempt", "type", "message", "traceback"} for e in kept)
    assert all(e["traceback"] == "},{\"" for e in kept)
