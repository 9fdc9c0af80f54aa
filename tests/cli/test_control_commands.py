"""The operator's commands through click's CliRunner against the test server:
pause, resume, retry, remove, promote, jobs, show, and status showing a pause."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import echomq
from echomq.cli import main

LONG = 60_000
Run = Callable[..., tuple[int, str]]


@pytest.fixture
def emq(server_url: str, executor: str) -> Run:
    """``emq --url <test server> --executor <executor> ARGS``: its exit code and output."""

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, ["--url", server_url, "--executor", executor,
                                           "--log-level", "WARNING", *args])
        return result.exit_code, result.output

    return run


@pytest.fixture
def dead(conn: echomq.Connection, queue: str) -> Iterator[list[str]]:
    """Three dead jobs, each with a traceback-like last error."""
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(3)], max_attempts=1)
    for held in echomq.claim(conn, queue, lease_ms=LONG, count=3):
        echomq.fail(conn, queue, held.id, held.token,
                    f"Traceback (most recent call last):\n  ...\nValueError: bad {held.id}")
    yield ids


def test_pause_resume_and_status(emq: Run, conn: echomq.Connection, queue: str) -> None:
    assert emq("pause", "-q", queue) == (0, f"paused {queue}\n")
    assert emq("pause", "-q", queue) == (0, f"{queue} was already paused\n")
    code, out = emq("status", "-q", queue, "--json")
    assert code == 0 and json.loads(out)["paused"] is True
    assert "paused: True" in emq("status", "-q", queue)[1]
    echomq.add(conn, queue, 1)
    assert echomq.claim(conn, queue) == []
    code, out = emq("resume", "-q", queue, "--json")
    assert code == 0 and json.loads(out) == {"queue": queue, "paused": False, "changed": True}
    assert emq("resume", "-q", queue) == (0, f"{queue} was not paused\n")
    assert len(echomq.claim(conn, queue)) == 1


def test_retry_needs_ids_or_all(emq: Run, conn: echomq.Connection, queue: str,
                                dead: list[str]) -> None:
    code, out = emq("retry", "-q", queue)
    assert code == 2 and "--all" in out
    code, out = emq("retry", "-q", queue, dead[0], "--all")
    assert code == 2
    assert echomq.counts(conn, queue).dead == 3  # nothing moved
    assert emq("retry", "-q", queue, dead[0], "not-dead") == (0, "retried 1 dead job(s)\n")
    code, out = emq("retry", "-q", queue, "--all", "--json")
    assert code == 0 and json.loads(out) == {"retried": 2}
    counts = echomq.counts(conn, queue)
    assert (counts.dead, counts.pending) == (0, 3)
    code, out = emq("retry", "-q", queue, "--all", "--limit", "0")
    assert code == 1 and "limit" in out


def test_jobs_pages_dead_rows_with_their_last_error(emq: Run, conn: echomq.Connection,
                                                   queue: str, dead: list[str]) -> None:
    code, out = emq("jobs", "-q", queue, "--state", "dead", "--count", "2", "--oldest-first")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "id\tattempts\tretried\tlast_error"
    rows = [line.split("\t") for line in lines[1:3]]
    oldest = echomq.list_jobs(conn, queue, "dead", newest_first=False)
    assert [row[0] for row in rows] == [job.id for job in oldest[:2]]
    assert all(row[3] == f"ValueError: bad {row[0]}" and row[1] == "1" for row in rows)
    assert lines[3] == "(next page: --start 2)"
    code, out = emq("jobs", "-q", queue, "--state", "dead", "--start", "2", "--json",
                    "--oldest-first")
    [last] = json.loads(out)
    assert code == 0 and last["state"] == "dead" and last["id"] == oldest[2].id
    assert last["last_error"].endswith(f"ValueError: bad {last['id']}")
    assert {row[0] for row in rows} | {last["id"]} == set(dead)
    assert emq("jobs", "-q", queue, "--state", "completed") == (
        0, "no completed jobs from position 0\n")
    code, out = emq("jobs", "-q", queue, "--state", "dead", "--count", "5000")
    assert code == 1 and "count" in out
    code, out = emq("jobs", "-q", queue, "--state", "lost")
    assert code == 2


def test_show_prints_the_row(emq: Run, conn: echomq.Connection, queue: str,
                             dead: list[str]) -> None:
    echomq.retry_dead(conn, queue, [dead[1]])
    code, out = emq("show", "-q", queue, dead[1], "--json")
    row: dict[str, Any] = json.loads(out)
    assert code == 0
    assert (row["state"], row["attempts"], row["retried"], row["payload"]) == (
        "pending", 1, 1, {"n": 1})
    assert row["last_error"].endswith(f"ValueError: bad {dead[1]}")
    assert row["created_at"].endswith("+00:00") and row["finished_at"] is None
    code, out = emq("show", "-q", queue, dead[1])
    assert code == 0 and "state: pending" in out and 'payload: {"n": 1}' in out
    assert "retried: 1" in out
    code, out = emq("show", "-q", queue, "never-added")
    assert code == 1 and "no job 'never-added'" in out


def test_remove_and_promote(emq: Run, conn: echomq.Connection, queue: str,
                            dead: list[str]) -> None:
    assert emq("remove", "-q", queue, dead[0]) == (0, f"removed {dead[0]}\n")
    assert echomq.get_job(conn, queue, dead[0]) is None
    code, out = emq("remove", "-q", queue, dead[0])
    assert code == 1 and "JobGone" in out
    later = echomq.add(conn, queue, {"n": "later"}, delay_ms=LONG)
    code, out = emq("promote", "-q", queue, later, "--json")
    assert code == 0 and json.loads(out) == {"promoted": later}
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    assert held.id == later
    code, out = emq("promote", "-q", queue, later)
    assert code == 1 and "NotScheduled" in out
    code, out = emq("remove", "-q", queue, later)
    assert code == 1 and "NotRemovable" in out
    code, out = emq("remove", "-q", "bad:queue", "x")
    assert code == 1 and "queue name" in out


@pytest.mark.parametrize("command", ["pause", "resume", "retry", "remove", "promote", "jobs",
                                     "show"])
def test_every_command_says_what_it_refuses(emq: Run, command: str) -> None:
    code, out = emq(command, "--help")
    assert code == 0 and "Refuses" in out and "--json" in out


def test_show_prints_progress_when_a_handler_reported_some(emq: Run, conn: echomq.Connection,
                                                           queue: str) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    code, out = emq("show", "-q", queue, job_id, "--json")
    assert code == 0 and "progress" not in json.loads(out)
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    echomq.report_progress(conn, queue, job_id, held.token, {"done": 3, "of": 10})
    code, out = emq("show", "-q", queue, job_id, "--json")
    row = json.loads(out)
    assert code == 0 and (row["state"], row["progress"]) == ("active", {"done": 3, "of": 10})


def test_show_lists_each_attempts_error_and_the_log_lines(
        conn: echomq.Connection, queue: str, emq: Run) -> None:
    job_id = echomq.add(conn, queue, {"n": 1}, max_attempts=2)
    for attempt in (1, 2):
        [held] = echomq.claim(conn, queue, lease_ms=LONG)
        echomq.append_log(conn, queue, job_id, held.token, f"fetched page {attempt}")
        try:
            raise KeyError(f"missing {attempt}")
        except KeyError as exc:
            echomq.fail(conn, queue, job_id, held.token, exc, delay_ms=0)
    code, out = emq("show", "-q", queue, job_id)
    assert code == 0, out
    lines = out.splitlines()
    at = lines.index("errors (2, oldest first):")
    assert lines[at + 1].endswith("  attempt 1  KeyError: 'missing 1'")
    assert lines[at + 2].endswith("  attempt 2  KeyError: 'missing 2'")
    assert lines[at + 1][2:6].isdigit() and "Traceback" not in out  # an ISO time first
    assert lines[at + 3] == "log (2 lines, oldest first):"
    assert lines[at + 4].endswith("  attempt 1  fetched page 1")
    code, traced = emq("show", "-q", queue, job_id, "--tracebacks")
    assert code == 0 and traced.count("    Traceback (most recent call last):") == 2
    code, out = emq("show", "-q", queue, job_id, "--json")
    row = json.loads(out)
    assert [e["message"] for e in row["errors"]] == ["'missing 1'", "'missing 2'"]
    assert [line["text"] for line in row["logs"]] == ["fetched page 1", "fetched page 2"]
    assert "--tracebacks" in emq("show", "--help")[1]


def test_show_prints_a_result_decoded_and_a_cancel_reason(
        conn: echomq.Connection, queue: str, emq: Run) -> None:
    from echomq.jobs.settle import complete_cancelled

    done, stopped = echomq.add(conn, queue, 1), echomq.add(conn, queue, 2)
    first, second = echomq.claim(conn, queue, lease_ms=LONG, count=2)
    echomq.complete(conn, queue, first.id, first.token, {"ok": [1]})
    complete_cancelled(conn, queue, second.id, second.token, "user asked")
    row = json.loads(emq("show", "-q", queue, done, "--json")[1])
    assert row["result"] == {"ok": [1]} and "cancel_reason" not in row
    row = json.loads(emq("show", "-q", queue, stopped, "--json")[1])
    assert (row["result"], row["cancel_reason"]) == (None, "user asked")
    assert "cancel_reason: user asked" in emq("show", "-q", queue, stopped)[1]
