"""``emq wait`` and ``emq events`` through the command line, against a real server."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from click.testing import CliRunner

import echomq
from echomq.cli import main
from echomq.jobs.settle import complete_cancelled
from echomq.queue.connection import Connection
from tests.support.waits import wait_until


def emq(conn: Connection, *args: str) -> Any:
    return CliRunner().invoke(main, ["--url", conn.url, "--executor", conn.executor_name,
                                     *args])


def finish(conn: Connection, queue: str, how: str) -> str:
    """A job of ``queue`` claimed and settled ``how`` (completed, cancelled or dead)."""
    job_id = echomq.add(conn, queue, {}, max_attempts=1)
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    if how == "completed":
        echomq.complete(conn, queue, held.id, held.token, {"ok": True})
    elif how == "cancelled":
        complete_cancelled(conn, queue, held.id, held.token, "stop")
    else:
        echomq.fail(conn, queue, held.id, held.token, "broken")
    return job_id


@pytest.mark.parametrize(("how", "status"), [("completed", 0), ("dead", 3), ("cancelled", 5)])
def test_emq_wait_prints_the_outcome_and_exits_by_it(conn, queue, how, status):
    job_id = finish(conn, queue, how)
    done = emq(conn, "wait", "-q", queue, job_id, "--json")
    assert done.exit_code == status, done.output
    printed = json.loads(done.output)
    assert printed["id"] == job_id and printed["outcome"] == how
    if how == "dead":
        assert printed["last_error"] == "broken"
    elif how == "cancelled":
        assert (printed["result"], printed["cancel_reason"]) == (None, "stop")
    else:
        assert printed["result"] == {"ok": True} and "cancel_reason" not in printed
    text = emq(conn, "wait", "-q", queue, job_id)
    assert f"outcome: {how}" in text.output


def test_emq_wait_times_out_with_status_4_naming_the_job(conn, queue):
    job_id = echomq.add(conn, queue, {})
    done = emq(conn, "wait", "-q", queue, job_id, "--timeout", "0.2", "--json")
    assert done.exit_code == 4, done.output
    printed = json.loads(done.output)
    assert printed["outcome"] == "timeout" and job_id in printed["error"]


def test_emq_wait_refuses_an_unknown_job_and_a_bad_timeout(conn, queue):
    done = emq(conn, "wait", "-q", queue, "nosuch")
    assert done.exit_code == 1 and "nosuch" in done.output
    done = emq(conn, "wait", "-q", queue, "any", "--timeout", "-1")
    assert done.exit_code == 2 and "--timeout" in done.output
    assert "Exit status" in emq(conn, "wait", "--help").output


def test_emq_events_prints_one_line_per_event(conn, queue):
    keys = conn.keys(queue)

    def produce() -> None:
        wait_until(lambda: dict(conn.redis.pubsub_numsub(keys.job_events))[keys.job_events])
        job_id = echomq.add(conn, queue, {})
        [held] = echomq.claim(conn, queue, lease_ms=60_000)
        echomq.report_progress(conn, queue, job_id, held.token, {"pct": 10})
        echomq.complete(conn, queue, job_id, held.token)

    producer = threading.Thread(target=produce)
    producer.start()
    done = emq(conn, "events", "-q", queue, "--count", "3", "--timeout", "20", "--json")
    producer.join(10)
    assert done.exit_code == 0, done.output
    lines = [json.loads(line) for line in done.output.splitlines()]
    assert [line["event"] for line in lines] == ["added", "progress", "completed"]
    assert lines[1]["value"] == {"pct": 10} and lines[1]["job"] == lines[2]["job"]


def test_emq_events_ends_at_its_timeout_and_refuses_a_bad_count(conn, queue):
    done = emq(conn, "events", "-q", queue, "--timeout", "0.2")
    assert done.exit_code == 0 and done.output == ""
    done = emq(conn, "events", "-q", queue, "--count", "0")
    assert done.exit_code == 1 and "count" in done.output
