"""``get_job`` reads what a job keeps for debugging: each failed attempt's error, its log
lines, its result decoded (like ``payload`` and ``progress``) and a cancelled job's reason.
Both executors, real servers."""

from __future__ import annotations

import pytest

import echomq
from echomq.jobs.settle import complete_cancelled
from echomq.records import AttemptError, LogLine
from tests.support.waits import server_ms

LONG = 60_000


def test_get_job_lists_errors_and_log_lines_across_retries(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, {"to": "a@b"}, max_attempts=3)
    before = server_ms(conn.redis)
    for attempt in (1, 2):
        [held] = echomq.claim(conn, queue, lease_ms=LONG)
        echomq.append_log(conn, queue, job_id, held.token, f"try {attempt}")
        try:
            raise OSError(f"refused {attempt}")
        except OSError as exc:
            echomq.fail(conn, queue, job_id, held.token, exc, delay_ms=0)
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    echomq.complete(conn, queue, job_id, held.token, {"sent": True, "n": [1, 2]})
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None
    after = server_ms(conn.redis)
    assert job.result == {"sent": True, "n": [1, 2]} and job.cancel_reason is None
    assert not job.cancelled
    assert [(e.attempt, e.type, e.message) for e in job.errors] == [
        (1, "OSError", "refused 1"), (2, "OSError", "refused 2")]
    assert all(isinstance(e, AttemptError) and e.at is not None and before <= e.at <= after
               and e.traceback.endswith(f"OSError: {e.message}\n") for e in job.errors)
    assert job.logs == [LogLine(job.logs[0].at, 1, "try 1"), LogLine(job.logs[1].at, 2, "try 2")]
    assert job.raw["result"] == '{"sent":true,"n":[1,2]}'  # the row's text, as stored


@pytest.mark.parametrize("result", [None, 0, "", "cancelled:not really", [1, "x"], 2.5])
def test_a_result_is_decoded(conn: echomq.Connection, queue: str, result: object) -> None:
    job_id = echomq.add(conn, queue, 1)
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    echomq.complete(conn, queue, job_id, held.token, result)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.result == result and job.cancel_reason is None


@pytest.mark.parametrize("reason", ["user asked", "", None])
def test_a_cancelled_job_has_its_reason_and_no_result(
    conn: echomq.Connection, queue: str, reason: str | None
) -> None:
    job_id = echomq.add(conn, queue, 1)
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    complete_cancelled(conn, queue, job_id, held.token, reason)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.state == "completed" and job.cancelled
    assert (job.result, job.cancel_reason) == (None, reason or "")
    assert echomq.wait(conn, queue, job_id, timeout_s=5).cancel_reason == (reason or "")


def test_a_job_never_run_has_no_errors_logs_or_result(
    conn: echomq.Connection, queue: str
) -> None:
    job = echomq.get_job(conn, queue, echomq.add(conn, queue, 1))
    assert job is not None
    assert (job.errors, job.logs, job.result, job.cancel_reason) == ([], [], None, None)


def test_rows_another_client_wrote_are_read_not_refused(
    conn: echomq.Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, 1)
    conn.redis.hset(conn.keys(queue).job(job_id), mapping={
        "errors": "not json", "logs": '[1, {"text": "kept", "at": "soon"}]',
        "result": "plain text"})
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.errors == [] and job.result == "plain text"
    assert job.logs == [LogLine(None, None, "kept")]
