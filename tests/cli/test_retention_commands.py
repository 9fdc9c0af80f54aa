"""``emq retention`` and ``emq purge``: show, set and clear a policy, purge by age, and
``emq scheduler`` applying retention on its own; every printing command speaks --json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import echomq
from echomq.archive import Driver
from echomq.cli import main
from tests.support import ROOT
from tests.support.waits import wait_until


def emq(conn: echomq.Connection, *args: str) -> tuple[int, str]:
    done = CliRunner().invoke(main, ["--url", conn.url, "--executor", conn.executor_name,
                                     *args])
    return done.exit_code, done.output


def settle(conn: echomq.Connection, queue: str, n: int) -> list[str]:
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(n)])
    for job in echomq.claim(conn, queue, lease_ms=10_000, count=n):
        echomq.complete(conn, queue, job.id, job.token, None)
    return ids


def test_retention_shows_sets_merges_and_clears_the_policy(conn, queue):
    code, out = emq(conn, "retention", "-q", queue, "--json")
    assert code == 0 and json.loads(out) == {
        "queue": queue, "completed_age_ms": None, "completed_count": None,
        "dead_age_ms": None, "dead_count": None}
    code, out = emq(conn, "retention", "-q", queue, "--completed-age", "7d", "--dead-count", "5")
    assert code == 0 and "completed_age: 7d" in out and "dead_count: 5" in out
    code, out = emq(conn, "retention", "-q", queue, "--dead-age", "400d", "--json")
    assert json.loads(out)["dead_age_ms"] == 400 * 86_400_000
    assert echomq.retention(conn, queue) == echomq.Retention(
        completed_age_ms=7 * 86_400_000, dead_age_ms=400 * 86_400_000, dead_count=5)
    code, out = emq(conn, "retention", "-q", queue, "--clear")
    assert code == 0 and echomq.retention(conn, queue).empty


@pytest.mark.parametrize("argv, message", [
    (["--completed-age", "30"], "not a duration"),
    (["--dead-age", "7 days"], "not a duration"),
    (["--clear", "--dead-count", "3"], "--clear"),
    (["--completed-count", "-1"], "completed_count"),
    (["--completed-age", "0s"], "completed_age_ms"),
])
def test_retention_refuses_bad_limits(conn, queue, argv, message):
    code, out = emq(conn, "retention", "-q", queue, *argv)
    assert code != 0 and message in out
    assert echomq.retention(conn, queue).empty


def test_purge_reports_rows_kept_for_the_archive(conn, queue, tmp_path: Path):
    echomq.archive.declare(conn, queue)
    settle(conn, queue, 3)
    driver = Driver(conn, tmp_path / "floor", claim_custody=True)
    try:
        driver.fold(queue)
    finally:
        driver.close()
    late = settle(conn, queue, 2)
    code, out = emq(conn, "purge", "-q", queue, "--state", "completed", "--json")
    assert code == 0 and json.loads(out) == {
        "queue": queue, "state": "completed", "purged": 3, "kept_for_archive": 2}
    code, out = emq(conn, "purge", "-q", queue, "--state", "completed")
    assert out.strip() == "purged 0 completed job(s); 2 kept for the archive (not folded yet)"
    assert [i for i in late if echomq.get_job(conn, queue, i)] == late


def test_purge_older_than(conn, queue):
    settle(conn, queue, 2)
    code, out = emq(conn, "purge", "-q", queue, "--state", "completed", "--older-than", "1h")
    assert code == 0 and out.strip() == "purged 0 completed job(s)"
    code, out = emq(conn, "purge", "-q", queue, "--state", "completed", "--older-than", "0s",
                    "--json")
    assert json.loads(out)["purged"] == 2


def test_retention_apply_now(conn, queue):
    settle(conn, queue, 4)
    code, out = emq(conn, "retention", "-q", queue, "--completed-count", "1", "--apply",
                    "--json")
    assert code == 0 and json.loads(out)["forgotten"] == 3
    echomq.set_retention(conn, queue)


def test_emq_scheduler_applies_retention_on_its_interval(conn, queue):
    ids = settle(conn, queue, 5)
    echomq.set_retention(conn, queue, completed_count=1)
    child = subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", conn.url, "--executor", conn.executor_name,
         "scheduler", "--retention-interval", "100ms"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ})
    try:
        wait_until(lambda: echomq.counts(conn, queue).completed == 1, timeout=30)
    finally:
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=30)
        echomq.set_retention(conn, queue)
    assert child.returncode == 0, out
    assert [i for i in ids if echomq.get_job(conn, queue, i)] == ids[-1:]
    assert f"retention of {queue!r}: forgot 4 finished row(s)" in out
