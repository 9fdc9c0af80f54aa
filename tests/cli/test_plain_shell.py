"""The shell speaks plainly (issue 20, items 19 and 20): human output is JSON for
structured values and ISO 8601 for times, every bad input is a one-line error, and the
flags agree across commands (durations with units, ``-q/--queue``, ``--s3-prefix``, an
``emq enqueue`` that needs a payload)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

import echomq
from echomq.cli import main
from echomq.cli.archive_options import QueueFirst
from echomq.cli.durations import Duration
from echomq.queue.connection import Connection
from echomq.servers.seaweed import SeaweedS3
from tests.support import ROOT
from tests.support.archive import remote_on
from tests.support.recorder import Recorder
from tests.support.waits import wait_until

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
RAW_MS = re.compile(r"(?<![\d-])1[6-9]\d{11}(?![\d-])")
"""An epoch-ms time printed raw (13 digits, not part of a stream id)."""


def emq(conn: Connection, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, ["--url", conn.url, "--executor", conn.executor_name,
                                     *args], input=stdin)


def settled(conn: Connection, queue: str, result: Any = None, *,
            progress: Any = None) -> str:
    job_id = echomq.add(conn, queue, {"to": "a@b"}, max_attempts=1)
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    if progress is not None:
        echomq.report_progress(conn, queue, held.id, held.token, progress)
    echomq.complete(conn, queue, held.id, held.token, result)
    return job_id


# item 19: readable human output -------------------------------------------------------


def test_wait_prints_structured_values_as_json_and_times_as_iso(conn, queue):
    job_id = settled(conn, queue, {"ok": True}, progress={"pct": 10, "step": "send"})
    done = emq(conn, "wait", "-q", queue, job_id)
    assert done.exit_code == 0, done.output
    lines = dict(line.split(": ", 1) for line in done.output.splitlines())
    assert json.loads(lines["progress"]) == {"pct": 10, "step": "send"}
    assert ISO.match(lines["finished_at"]), lines["finished_at"]
    assert lines["last_error"] == "-"
    assert "'" not in done.output and not RAW_MS.search(done.output)
    as_json = json.loads(emq(conn, "wait", "-q", queue, job_id, "--json").output)
    assert isinstance(as_json["finished_at"], int)  # --json keeps the number
    assert "ms since the epoch" in emq(conn, "wait", "--help").output


def test_schedule_prints_its_payload_and_options_as_json(conn, queue):
    done = emq(conn, "schedule", "-q", queue, "nightly", "0 3 * * *",
               '{"kind": "digest", "to": ["a", "b"]}', "--delay", "30s")
    assert done.exit_code == 0, done.output
    lines = dict(line.split(": ", 1) for line in done.output.splitlines())
    assert json.loads(lines["payload"]) == {"kind": "digest", "to": ["a", "b"]}
    assert json.loads(lines["options"])["delay_ms"] == 30_000
    assert "'" not in done.output


def test_events_print_progress_and_reasons_as_json(conn, queue):
    keys = conn.keys(queue)

    def produce() -> None:
        wait_until(lambda: dict(conn.redis.pubsub_numsub(keys.job_events))[keys.job_events])
        job_id = echomq.add(conn, queue, {}, max_attempts=1)
        [held] = echomq.claim(conn, queue, lease_ms=60_000)
        echomq.report_progress(conn, queue, job_id, held.token, {"pct": 50})
        echomq.fail(conn, queue, job_id, held.token, "it's broken")

    producer = threading.Thread(target=produce)
    producer.start()
    done = emq(conn, "events", "-q", queue, "--count", "3", "--timeout", "20s")
    producer.join(10)
    assert done.exit_code == 0, done.output
    added, progress, dead = done.output.splitlines()
    assert progress.endswith(' {"pct": 50}'), progress
    assert dead.startswith("dead ") and dead.endswith(' "it\'s broken"'), dead


@pytest.fixture
def folded(rec: Recorder, tmp_path: Path) -> Iterator[tuple[Recorder, str]]:
    """A floor (no bucket) holding six outcomes of ``rec``'s queue, one with a
    two-line error."""
    from echomq.archive import Driver

    rec.add(5)
    rec.conn.redis.xadd(rec.key, {"job": "job-5", "outcome": "dead", "result":
                                  "Traceback (most recent call last):\nValueError: no",
                                  "attempts": "3", "at": "1700000000005",
                                  "created_at": "1700000000000"})
    floor = str(tmp_path / "floor")
    with Driver(rec.conn, floor) as driver:
        driver.fold(rec.queue)
    yield rec, floor


def test_archive_status_and_audit_read_as_tables_with_iso_times(folded) -> None:
    from echomq.cli.archive import archive_cli

    rec, floor = folded
    status = CliRunner().invoke(archive_cli, ["status", "--floor", floor])
    assert status.exit_code == 0, status.output
    assert "2023-11-14T22:13:20.000Z" in status.output  # oldest_at
    assert not RAW_MS.search(status.output), status.output
    audit = CliRunner().invoke(archive_cli, ["audit", rec.queue, "--floor", floor])
    assert audit.exit_code == 0, audit.output
    header = next(line for line in audit.output.splitlines() if "job_id" in line)
    assert [c.strip() for c in re.split(r"[┃│]", header) if c.strip()] == [
        "at", "job_id", "outcome", "attempts", "result"]
    rows = [line for line in audit.output.splitlines() if "job-" in line]
    assert len(rows) == 6, audit.output  # one table, a row per outcome
    assert "2023-11-14T22:13:20.005Z" in rows[-1] and "Traceback" in rows[-1]
    assert not RAW_MS.search(audit.output), audit.output
    as_json = CliRunner().invoke(archive_cli, ["status", "--floor", floor, "--json"])
    assert isinstance(json.loads(as_json.output)["oldest_at"], int)


def test_restore_reports_its_head_with_the_time(rec: Recorder, seaweed: SeaweedS3,
                                                tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from echomq.archive import Driver
    from echomq.cli.archive import archive_cli

    rec.add(3)
    bucket = f"plain-{uuid.uuid4().hex[:10]}"
    remote = remote_on(seaweed, bucket, create_bucket=True)
    with Driver(rec.conn, str(tmp_path / "floor"), remote) as driver:
        driver.fold(rec.queue)
    for name, value in {"EMQ_S3_ENDPOINT_URL": seaweed.endpoint_url,
                        "EMQ_S3_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": seaweed.access_key,
                        "AWS_SECRET_ACCESS_KEY": seaweed.secret_key}.items():
        monkeypatch.setenv(name, value)
    done = CliRunner().invoke(archive_cli, ["restore", "-q", rec.queue, "--bucket", bucket,
                                            "--floor", str(tmp_path / "again")])
    assert done.exit_code == 0, done.output
    head = next(line for line in done.output.splitlines() if "│ head " in line)
    assert re.search(r"\d+-\d+ \(\d{4}-\d\d-\d\dT[\d:.]+Z\)", head), head


def test_the_scheduler_says_what_it_runs_and_is_quiet_when_idle(server_url: str,
                                                                  tmp_path: Path) -> None:
    prefix = f"plain-{uuid.uuid4().hex[:8]}"
    conn = echomq.connect(server_url, prefix=prefix)
    log = tmp_path / "scheduler.log"
    try:
        echomq.archive.declare(conn, "idle")
        with log.open("w") as out:
            child = subprocess.Popen(
                [sys.executable, "-m", "echomq", "--url", server_url, "--prefix", prefix,
                 "scheduler", "-q", "idle", "--fold", "--fold-interval", "100ms",
                 "--sweep-interval", "100ms", "--retention-interval", "100ms",
                 "--floor", str(tmp_path / "floor")],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            wait_until(lambda: "scheduler on" in log.read_text(), timeout=60)
            time.sleep(2)  # many passes, none with anything to do
        finally:
            child.send_signal(signal.SIGINT)
            child.wait(timeout=30)
    finally:
        echomq.archive.undeclare(conn, "idle")
        conn.close()
    lines = [ln for ln in log.read_text().splitlines() if " echomq" in ln]
    assert lines, log.read_text()
    start = lines[0]
    for said in ("cron fires every 1s", "stalled sweep every 100ms of idle",
                 "retention every 100ms", "archive fold every 100ms", "prune every 1h"):
        assert said in start, start
    assert lines[1:] == [], lines  # idle passes log nothing


# item 19: every bad input is a one-line error ------------------------------------------


def assert_one_line_error(done: Result, *, says: str) -> None:
    assert isinstance(done.exception, SystemExit), repr(done.exception)
    assert done.exit_code in (1, 2), done.output
    assert "Traceback" not in done.output
    error = [line for line in done.output.splitlines() if line.startswith("Error")]
    assert len(error) == 1 and says in error[0], done.output


@pytest.mark.parametrize(("argv", "says"), [
    (["enqueue", "-q", "Q", "[" * 5000 + "]" * 5000], "nested too deeply"),
    (["dead", "-q", "Q", "--limit", "-1"], "--limit"),
    (["dead", "-q", "no{brace}"], "no{brace}"),
    (["reap", "-q", "no{brace}"], "no{brace}"),
    (["sweep", "-q", "Q", "--limit", "0"], "limit must be a positive integer"),
    (["purge", "-q", "Q", "--keep", "-1"], "--keep"),
    (["enqueue", "-q", "Q", "{}", "--delay", "-5s"], "--delay"),
    (["enqueue", "-q", "Q", "{}", "--delay", "30"], "--delay"),
    (["enqueue", "-q", "Q", "1", "2", "--job-id", "x"], "--job-id"),
    (["schedule", "-q", "Q", "n", "* * * * *", "[" * 5000], "nested too deeply"),
    (["wait", "-q", "Q", "1", "--timeout", "0"], "--timeout"),
    (["events", "-q", "Q", "--timeout", "soon"], "--timeout"),
    (["worker", "tests.support.workers:sleepy", "-q", "Q", "--concurrency", "0"],
     "--concurrency"),
    (["worker", "tests.support.workers:sleepy", "-q", "Q", "--lease", "0s"], "--lease"),
    (["scheduler", "--sweep-interval", "1.5"], "--sweep-interval"),
    (["archive", "audit", "Q", "--limit", "-1"], "--limit"),
    (["archive", "fold", "Q", "--slice-count", "0"], "--slice-count"),
    (["archive", "prune", "Q", "--keep", "٣d"], "--keep"),
    (["archive", "audit", "Q", "--since", "9" * 30], "9" * 30),
    (["archive", "verify", "--pin", "no-digest", "--bucket", "b"], "--pin"),
])
def test_a_bad_input_is_one_line_error(conn: Connection, argv: list[str], says: str) -> None:
    assert_one_line_error(emq(conn, *argv), says=says)


def test_export_to_a_folder_is_one_line_error(folded, tmp_path: Path) -> None:
    rec, floor = folded
    for fmt in ("jsonl", "parquet"):
        done = CliRunner().invoke(main, ["archive", "export", rec.queue, str(tmp_path),
                                         "--format", fmt, "--floor", floor])
        assert_one_line_error(done, says=str(tmp_path))


def test_sql_that_duckdb_refuses_is_one_line_error(folded) -> None:
    """DuckDB's message went out as three lines: the error, the SQL and a caret under it."""
    rec, floor = folded
    for sql, says in (("SELECT * FORM outcomes", "syntax error"),
                      ("SELECT nope FROM outcomes", "LINE 1: SELECT nope FROM outcomes")):
        done = CliRunner().invoke(main, ["archive", "query", sql, "--floor", floor])
        assert_one_line_error(done, says=says)
        assert len(done.output.strip().splitlines()) == 1, done.output


def test_commands_that_read_a_floor_never_create_one(tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    for argv in (["status"], ["audit", "Q"], ["show", "Q", "1"], ["ack-gap", "Q"]):
        done = CliRunner().invoke(main, ["archive", *argv, "--floor", str(missing)])
        assert_one_line_error(done, says=f"no floor at {missing}")
    assert not missing.exists()


# item 20: flags agree -------------------------------------------------------------------


def every_command() -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(main)
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            for sub in command.list_commands(ctx):
                found = command.get_command(ctx, sub)
                assert found is not None
                yield f"{name} {sub}", found
        else:
            yield name, command


DURATION_WORDS = ("lease", "grace", "interval", "timeout", "delay", "wait", "keep-age",
                  "older-than", "-age")


def test_every_duration_option_takes_units() -> None:
    """No option counts in bare milliseconds; every duration goes through one type."""
    seen = []
    for name, command in every_command():
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            longest = max(param.opts, key=len)
            assert not longest.endswith("-ms"), (name, longest)
            if any(word in longest for word in DURATION_WORDS):
                assert isinstance(param.type, Duration), (name, longest)
                seen.append(f"{name} {longest}")
    for expected in ("enqueue --delay", "worker --lease", "worker --grace",
                     "scheduler --fold-lease", "wait --timeout", "events --timeout",
                     "schedule --delay", "purge --older-than", "archive prune --wait"):
        assert expected in seen, seen


def test_the_timeout_keeps_bare_seconds_and_takes_units(conn, queue):
    job_id = echomq.add(conn, queue, {})
    for value in ("0.2", "200ms"):
        done = emq(conn, "wait", "-q", queue, job_id, "--timeout", value, "--json")
        assert done.exit_code == 4, done.output
        assert "within 0.2s" in json.loads(done.output)["error"]


def test_every_queue_option_is_spelled_q_or_queue() -> None:
    for name, command in every_command():
        for param in command.params:
            if isinstance(param, click.Option) and param.name in ("queue", "queues"):
                assert sorted(param.opts) == ["--queue", "-q"], (name, param.opts)


def test_a_command_whose_argument_is_the_queue_takes_q_too(conn, queue, tmp_path):
    """The archive's commands named the queue as an argument where every other command
    takes ``-q``: ``emq archive audit -q demo`` was "No such option: -q"."""
    for name, command in every_command():
        first = next((p for p in command.params if isinstance(p, click.Argument)), None)
        if first is not None and first.name in ("queue", "queues"):
            assert isinstance(command, QueueFirst), name
    settled(conn, queue, {"n": 1})
    echomq.archive.declare(conn, queue)
    settled(conn, queue, {"n": 2})
    floor = str(tmp_path / "floor")
    assert emq(conn, "archive", "fold", "-q", queue, "--floor", floor).exit_code == 0
    for argv in (["status", "QUEUE"], ["audit", "QUEUE"], ["audit", "QUEUE", "--outcome",
                                                           "completed", "--limit", "5"]):
        positional = emq(conn, "archive", *[queue if w == "QUEUE" else w for w in argv],
                         "--floor", floor, "--json")
        assert positional.exit_code == 0 and queue in positional.output, positional.output
        for spelled in (["-q", queue], [f"--queue={queue}"], [f"-q{queue}"]):
            words = [w for w in argv if w != "QUEUE"]
            moved = emq(conn, "archive", *words[:1], "--floor", floor, *spelled, *words[1:],
                        "--json")
            assert (moved.exit_code, moved.output) == (0, positional.output), (argv, spelled)
    # a value that reads like the option is still the value of its own option
    noted = emq(conn, "archive", "ack-gap", "-q", queue, "--note", "-qx", "--floor", floor)
    assert noted.exit_code == 1, noted.output
    assert noted.output.startswith(f"{queue}: no open gap"), noted.output  # not queue "x"
    missing = emq(conn, "archive", "status", "--floor", floor, "-q")
    assert missing.exit_code == 2 and "-q needs a queue name" in missing.output


def test_the_s3_key_prefix_is_s3_prefix() -> None:
    for name, command in every_command():
        opts = {o for p in command.params for o in p.opts}
        if "--bucket" in opts:
            assert "--s3-prefix" in opts and "--prefix" not in opts, name
    shown = CliRunner().invoke(main, ["scheduler", "--help"])
    assert "--s3-prefix" in shown.output


def test_enqueue_needs_a_payload_or_stdin_and_takes_name_and_group(conn, queue):
    empty = emq(conn, "enqueue", "-q", queue, stdin="")
    assert empty.exit_code == 2 and "no payload" in empty.output
    assert echomq.counts(conn, queue).pending == 0
    piped = emq(conn, "enqueue", "-q", queue, "--name", "mail", "--group", "tenant-1",
                stdin='{"n": 1}\n{"n": 2}\n')
    assert piped.exit_code == 0, piped.output
    dash = emq(conn, "enqueue", "-q", queue, "-", "--delay", "1h", stdin='{\n "n": 3\n}\n')
    assert dash.exit_code == 0, dash.output
    jobs = [echomq.get_job(conn, queue, i) for i in piped.output.split() + dash.output.split()]
    assert [(j.payload, j.name, j.group) for j in jobs if j] == [
        ({"n": 1}, "mail", "tenant-1"), ({"n": 2}, "mail", "tenant-1"), ({"n": 3}, None, None)]
    assert str(jobs[2].state) == "scheduled"  # type: ignore[union-attr]
