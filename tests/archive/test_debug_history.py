"""A recorded outcome carries its attempts' errors and its log lines into the stream, so
the archive keeps why a job died after Redis forgot it: ``Floor.history``, ``emq archive
show`` and the SQL view ``outcomes`` expose them. Both executors, real servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import echomq
from echomq.archive import Driver, Floor, declare
from echomq.cli import main as emq
from echomq.jobs.settle import complete_cancelled
from tests.support.waits import wait_lapsed

LONG = 60_000


def boom(n: int) -> ValueError:
    try:
        raise ValueError(f"boom {n}")
    except ValueError as exc:
        return exc


def settle_three(conn: echomq.Connection, queue: str) -> dict[str, str]:
    """A job dead after three failed attempts that logged, one completed after one failed
    attempt, one cancelled that logged, and one completed with neither."""
    ids = {"dead": echomq.add(conn, queue, {"k": "dead"}, max_attempts=3),
           "done": echomq.add(conn, queue, {"k": "done"}, max_attempts=3),
           "cancelled": echomq.add(conn, queue, {"k": "cancelled"}),
           "plain": echomq.add(conn, queue, {"k": "plain"})}
    for attempt in (1, 2, 3):
        for held in echomq.claim(conn, queue, lease_ms=LONG, count=10):
            kind = held.payload["k"]
            if kind == "dead":
                echomq.append_log(conn, queue, held.id, held.token, f"try {attempt}")
                echomq.fail(conn, queue, held.id, held.token, boom(attempt), delay_ms=0)
            elif kind == "done" and attempt == 1:
                echomq.fail(conn, queue, held.id, held.token, "flaky", delay_ms=0)
            elif kind == "cancelled":
                echomq.append_log(conn, queue, held.id, held.token, "asked to stop")
                complete_cancelled(conn, queue, held.id, held.token, "user asked")
            else:
                echomq.complete(conn, queue, held.id, held.token, {"ok": kind})
    return ids


def stream_fields(conn: echomq.Connection, queue: str) -> dict[str, dict[str, str]]:
    entries = conn.redis.xrange(conn.keys(queue).completions)
    return {fields["job"]: fields for _, fields in entries}


def test_errors_and_logs_reach_the_stream_and_outlive_the_row(
    conn: echomq.Connection, queue: str, tmp_path: Path
) -> None:
    declare(conn, queue)
    ids = settle_three(conn, queue)
    recorded = stream_fields(conn, queue)
    assert [e["attempt"] for e in json.loads(recorded[ids["dead"]]["errors"])] == [1, 2, 3]
    assert [e["text"] for e in json.loads(recorded[ids["dead"]]["logs"])] == [
        "try 1", "try 2", "try 3"]
    assert [e["message"] for e in json.loads(recorded[ids["done"]]["errors"])] == ["flaky"]
    assert "logs" not in recorded[ids["done"]]
    assert "errors" not in recorded[ids["cancelled"]]
    assert "errors" not in recorded[ids["plain"]] and "logs" not in recorded[ids["plain"]]

    path = tmp_path / "floor"
    driver = Driver(conn, path, slice_count=2, claim_custody=True)
    driver.fold(queue)
    driver.close()
    assert echomq.purge(conn, queue, "dead") == 1
    assert echomq.purge(conn, queue, "completed") == 3
    assert all(echomq.get_job(conn, queue, i) is None for i in ids.values())

    with Floor(path) as floor:
        [dead] = floor.history(queue, ids["dead"])
        [done] = floor.history(queue, ids["done"])
        [plain] = floor.history(queue, ids["plain"])
        [cancelled] = floor.history(queue, ids["cancelled"])
        answer = floor.query(
            "SELECT job_id, errors, logs FROM outcomes WHERE queue = "
            f"'{queue}' ORDER BY job_id").to_dicts()
    assert dead.outcome == "dead" and dead.extra == ()
    assert [(e["attempt"], e["type"], e["message"]) for e in dead.errors_value] == [
        (1, "ValueError", "boom 1"), (2, "ValueError", "boom 2"), (3, "ValueError", "boom 3")]
    assert all("ValueError: boom" in e["traceback"] for e in dead.errors_value)
    assert [line["text"] for line in dead.logs_value] == ["try 1", "try 2", "try 3"]
    assert [e["message"] for e in done.errors_value] == ["flaky"] and done.logs is None
    assert [line["text"] for line in cancelled.logs_value] == ["asked to stop"]
    assert (plain.errors, plain.logs, plain.errors_value, plain.logs_value) == (
        None, None, [], [])
    assert dead.to_dict()["errors"] == dead.errors and "errors" not in plain.to_dict()

    by_job = {row["job_id"]: row for row in answer}
    assert json.loads(by_job[ids["dead"]]["errors"]) == dead.errors_value
    assert json.loads(by_job[ids["dead"]]["logs"]) == dead.logs_value
    assert (by_job[ids["plain"]]["errors"], by_job[ids["plain"]]["logs"]) == (None, None)
    assert by_job[ids["cancelled"]]["errors"] is None

    runner = CliRunner()
    shown = runner.invoke(emq, ["archive", "show", queue, ids["dead"], "--floor", str(path),
                                "--json"])
    assert shown.exit_code == 0, shown.output
    row: dict[str, Any] = json.loads(shown.output)
    assert json.loads(row["errors"]) == dead.errors_value
    assert json.loads(row["logs"]) == dead.logs_value
    human = runner.invoke(emq, ["archive", "show", queue, ids["dead"], "--floor", str(path)],
                          terminal_width=200)
    assert human.exit_code == 0, human.output
    assert "attempt 3  ValueError: boom 3" in human.output
    assert "attempt 2  try 2" in human.output and "Traceback" not in human.output
    traced = runner.invoke(emq, ["archive", "show", queue, ids["dead"], "--floor", str(path),
                                 "--tracebacks"], terminal_width=200)
    assert traced.exit_code == 0, traced.output
    assert traced.output.count("    Traceback (most recent call last):") == 3


def test_a_stalled_job_carries_its_errors_and_logs_too(
    conn: echomq.Connection, queue: str
) -> None:
    declare(conn, queue)
    job_id = echomq.add(conn, queue, 1, max_attempts=2)
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    echomq.append_log(conn, queue, job_id, held.token, "before the crash")
    echomq.fail(conn, queue, job_id, held.token, "first", delay_ms=0)
    [held] = echomq.claim(conn, queue, lease_ms=1)
    wait_lapsed(conn.redis, queue, job_id)
    assert echomq.stalled_check(conn, queue, max_stalled=1).dead == [job_id]
    fields = stream_fields(conn, queue)[job_id]
    assert (fields["outcome"], fields["result"]) == ("dead", "stalled")
    assert [e["message"] for e in json.loads(fields["errors"])] == ["first"]
    assert [e["text"] for e in json.loads(fields["logs"])] == ["before the crash"]
