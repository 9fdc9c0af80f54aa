"""``emq drain`` and ``emq obliterate``: they name what is about to go, ask first (or
refuse with no terminal to ask on), report what went, and refuse what the verbs refuse."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner, Result

import echomq
from echomq.cli import main
from echomq.queue.connection import Connection
from tests.support import ROOT

LONG = 60_000


def emq(conn: Connection, *args: str) -> Result:
    return CliRunner().invoke(
        main, ["--url", conn.url, "--executor", conn.executor_name, *args],
        catch_exceptions=False)


def some_jobs(conn: Connection, queue: str) -> None:
    echomq.add_many(conn, queue, [1, 2, 3])
    echomq.add_many(conn, queue, [4, 5], group="g")
    echomq.add(conn, queue, 6, delay_ms=LONG)


def test_drain_with_yes_reports_what_went_as_json(conn: Connection, queue: str) -> None:
    some_jobs(conn, queue)
    done = emq(conn, "drain", "-q", queue, "--yes", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output) == {"queue": queue, "removed": 6, "pending": 5,
                                       "scheduled": 1}
    assert echomq.counts(conn, queue) == echomq.Counts(0, 0, 0, 0, 0)


def test_drain_keep_scheduled_leaves_the_delayed_job(conn: Connection, queue: str) -> None:
    some_jobs(conn, queue)
    done = emq(conn, "drain", "-q", queue, "--keep-scheduled", "--yes")
    assert done.exit_code == 0, done.output
    assert "removed: 5" in done.output
    assert echomq.counts(conn, queue) == echomq.Counts(0, 1, 0, 0, 0)


@pytest.mark.parametrize("command", ["drain", "obliterate"])
def test_without_a_terminal_and_without_yes_nothing_goes(conn: Connection, queue: str,
                                                         command: str) -> None:
    some_jobs(conn, queue)
    done = emq(conn, command, "-q", queue)
    assert done.exit_code == 2
    assert "no terminal to confirm on: pass --yes" in done.output
    assert echomq.counts(conn, queue) == echomq.Counts(5, 1, 0, 0, 0)


def test_obliterate_refuses_while_jobs_are_active_then_force_goes(
    conn: Connection, queue: str,
) -> None:
    some_jobs(conn, queue)
    echomq.claim(conn, queue, lease_ms=LONG)
    done = emq(conn, "obliterate", "-q", queue, "--yes")
    assert done.exit_code == 1
    assert "1 jobs are active" in done.output and "--force" in done.output
    assert echomq.counts(conn, queue).pending == 4

    done = emq(conn, "obliterate", "-q", queue, "--yes", "--force", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["queue"] == queue and report["keys_removed"] > 6
    assert (report["pending"], report["scheduled"], report["active"]) == (4, 1, 1)
    assert echomq.counts(conn, queue) == echomq.Counts(0, 0, 0, 0, 0)


def test_obliterate_refuses_unarchived_history(conn: Connection, queue: str) -> None:
    echomq.archive.declare(conn, queue)
    echomq.add(conn, queue, 1)
    [job] = echomq.claim(conn, queue, lease_ms=LONG)
    echomq.complete(conn, queue, job.id, job.token)
    done = emq(conn, "obliterate", "-q", queue, "--yes")
    assert done.exit_code == 1
    assert "holds 1 entries the archive has not folded" in done.output
    assert echomq.counts(conn, queue).completed == 1


def test_help_says_what_each_refuses(conn: Connection) -> None:
    drain_help = emq(conn, "drain", "--help").output
    assert "Active jobs run on" in drain_help and "--yes" in drain_help
    obliterate_help = emq(conn, "obliterate", "--help").output
    assert "Refuses while jobs are active" in obliterate_help
    assert "not folded" in obliterate_help and "--force" in obliterate_help


def read_until(fd: int, text: str, timeout: float = 20.0) -> str:
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        assert time.monotonic() < deadline, seen
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 4096).decode(errors="replace")
            except OSError:  # the child closed the terminal
                break
    return seen


@pytest.mark.parametrize(("answer", "left"), [("n", 6), ("y", 0)])
def test_on_a_terminal_obliterate_asks_naming_the_queue_and_the_counts(
    conn: Connection, queue: str, answer: str, left: int,
) -> None:
    some_jobs(conn, queue)
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", conn.url, "--executor", conn.executor_name,
         "obliterate", "-q", queue],
        stdin=follower, stdout=follower, stderr=follower, cwd=ROOT, close_fds=True)
    os.close(follower)
    try:
        asked = read_until(leader, "[y/N]")
        assert f"Obliterate queue {queue!r}: 5 pending, 1 scheduled, 0 active" in asked
        os.write(leader, f"{answer}\n".encode())
        read_until(leader, "keys_removed" if answer == "y" else "Aborted")
        assert child.wait(timeout=20) == (0 if answer == "y" else 1)
    finally:
        child.kill()
        os.close(leader)
    counts = echomq.counts(conn, queue)
    assert counts.pending + counts.scheduled == left
