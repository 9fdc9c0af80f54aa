"""``job.log``: bounded lines on the row, fenced by the holder's token like ``progress``.

log-2.lua appends ``{"at", "attempt", "text"}`` to the row's ``logs`` (the last 100 lines
and 64 KiB kept, the oldest dropped first), only while the caller's token holds the job.
On both executors, through the verb and through a real Consumer's ``JobContext.log``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import echomq
from echomq.queue.keys import Keys
from tests.support.consumers import ConsumerThreads
from tests.support.waits import server_ms, wait_lapsed, wait_until

LONG = 60_000
SHORT = 40


def logs_of(conn: echomq.Connection, queue: str, job_id: str) -> list[dict[str, Any]]:
    text = conn.redis.hget(conn.keys(queue).job(job_id), "logs")
    return json.loads(text) if text else []


def claim_one(conn: echomq.Connection, queue: str, lease_ms: int = LONG) -> echomq.ClaimedJob:
    [held] = echomq.claim(conn, queue, lease_ms=lease_ms)
    return held


def test_lines_are_kept_in_order_with_their_time_and_attempt(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, 1)
    held = claim_one(conn, queue)
    before = server_ms(conn.redis)
    for text in ("fetched 3 pages", "caf\u00e9 \u2713 \"quoted\" / \\ \n second line", "done"):
        assert echomq.append_log(conn, queue, job_id, held.token, text) is None
    after = server_ms(conn.redis)
    lines = logs_of(conn, queue, job_id)
    assert [line["text"] for line in lines] == [
        "fetched 3 pages", "caf\u00e9 \u2713 \"quoted\" / \\ \n second line", "done"]
    assert {line["attempt"] for line in lines} == {held.token}
    assert all(before <= line["at"] <= after for line in lines)


def test_the_log_keeps_the_last_100_lines(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, 1)
    held = claim_one(conn, queue)
    for n in range(130):
        echomq.append_log(conn, queue, job_id, held.token, f"line {n}")
    lines = logs_of(conn, queue, job_id)
    assert [line["text"] for line in lines] == [f"line {n}" for n in range(30, 130)]


def test_the_log_keeps_the_last_64_kib(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, 1)
    held = claim_one(conn, queue)
    for n in range(20):
        echomq.append_log(conn, queue, job_id, held.token, f"{n:02d}" + "x" * 10_000)
    text = conn.redis.hget(conn.keys(queue).job(job_id), "logs")
    assert text is not None and len(text.encode()) <= 64 * 1024
    kept = [line["text"][:2] for line in json.loads(text)]
    assert kept == [f"{n:02d}" for n in range(20 - len(kept), 20)] and len(kept) == 6
    # one line of the full 64 KiB is kept whole: the newest line always stays
    echomq.append_log(conn, queue, job_id, held.token, "y" * (64 * 1024))
    assert [line["text"] for line in logs_of(conn, queue, job_id)] == ["y" * (64 * 1024)]


def test_a_stale_holder_cannot_log(conn: echomq.Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, 1)
    old = claim_one(conn, queue, SHORT)
    echomq.append_log(conn, queue, job_id, old.token, "first run")
    wait_lapsed(conn.redis, queue, job_id)
    assert echomq.reap(conn, queue) == [job_id]
    with pytest.raises(echomq.NotActive):  # reaped, not claimed again yet
        echomq.append_log(conn, queue, job_id, old.token, "between runs")
    new = claim_one(conn, queue)
    assert new.token == old.token + 1
    with pytest.raises(echomq.StaleToken):
        echomq.append_log(conn, queue, job_id, old.token, "from the old holder")
    echomq.append_log(conn, queue, job_id, new.token, "second run")
    assert [(line["attempt"], line["text"]) for line in logs_of(conn, queue, job_id)] == [
        (old.token, "first run"), (new.token, "second run")]
    with pytest.raises(echomq.JobGone):
        echomq.append_log(conn, queue, "nosuch", 1, "who")


@pytest.mark.parametrize("text", [b"bytes", 7, None, "", "x" * (64 * 1024 + 1),
                                  "\u00e9" * (32 * 1024 + 1), "lone \udc80"])
def test_a_bad_line_is_refused_before_the_wire(
    conn: echomq.Connection, queue: str, text: Any
) -> None:
    job_id = echomq.add(conn, queue, 1)
    held = claim_one(conn, queue)
    with pytest.raises(echomq.InvalidArgument, match="log line"):
        echomq.append_log(conn, queue, job_id, held.token, text)
    with pytest.raises(echomq.InvalidArgument, match="token"):
        echomq.append_log(conn, queue, job_id, True, "ok")  # type: ignore[arg-type]
    assert "logs" not in conn.redis.hgetall(Keys(queue).job(job_id))


@pytest.fixture
def start(conn: echomq.Connection, queue: str) -> Iterator[Any]:
    threads = ConsumerThreads(conn, queue, poll_ms=100)
    yield threads.start
    threads.stop_all()


def test_a_handler_logs_through_its_job_context(
    conn: echomq.Connection, queue: str, start: Any
) -> None:
    refused: list[BaseException] = []
    ran = threading.Event()

    def handler(job: Any) -> str:
        job.log("starting")
        try:
            job.log("")
        except echomq.InvalidArgument as exc:
            refused.append(exc)
        job.log(f"payload {job.payload}")
        ran.set()
        return "ok"

    job_id = echomq.add(conn, queue, 5)
    start(handler)
    wait_until(lambda: (j := echomq.get_job(conn, queue, job_id)) and j.state == "completed")
    assert ran.is_set() and len(refused) == 1
    assert [line["text"] for line in logs_of(conn, queue, job_id)] == ["starting", "payload 5"]


def test_a_spoiled_log_field_is_replaced_never_a_failed_call(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, 1, max_attempts=2)
    held = claim_one(conn, queue)
    conn.redis.hset(conn.keys(queue).job(job_id), mapping={"logs": "[{\"oops", "errors": "]"})
    echomq.append_log(conn, queue, job_id, held.token, "after")
    assert [line["text"] for line in logs_of(conn, queue, job_id)] == ["after"]
    assert echomq.fail(conn, queue, job_id, held.token, "boom", delay_ms=0) == "retrying"
    row = echomq.get_job(conn, queue, job_id)
    assert row is not None and [e.message for e in row.errors] == ["boom"]


def test_lines_past_the_fast_path_keep_the_exact_bounds(
    conn: echomq.Connection, queue: str
) -> None:
    """Lines holding what looks like an object's opening are still counted right enough:
    a line's quote is escaped, so the count never runs past 100 kept lines."""
    job_id = echomq.add(conn, queue, 1)
    held = claim_one(conn, queue)
    for n in range(105):
        echomq.append_log(conn, queue, job_id, held.token, f'{{"n": {n}}} {{"')
    lines = logs_of(conn, queue, job_id)
    assert [line["text"] for line in lines] == [f'{{"n": {n}}} {{"' for n in range(5, 105)]
