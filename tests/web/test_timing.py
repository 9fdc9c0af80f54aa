"""Issue 26, item 3: timing everywhere, through Starlette's test client on a real Valkey
(both executors): durations of finished jobs, the due time of a scheduled one, the elapsed
time, lease deadline and progress bar of a running one, relative times with the absolute
time on hover, and tries as "attempt N of M", also after a dead-letter retry."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import echomq
from echomq.queue.connection import Connection
from echomq.web.timing import fraction, relative, span
from tests.web.test_routes import client

TIME = re.compile(r'<time datetime="([0-9T:.-]+Z)" title="\1">([^<]+)</time>')


def row_of(page: str, job_id: str) -> str:
    found = re.search(rf'<tr data-job="{re.escape(job_id)}">(.*?)</tr>', page, re.S)
    assert found, page
    return found.group(1)


def test_the_words_for_times_spans_and_fractions() -> None:
    assert span(850) == "850 ms" and span(4200) == "4.2 s" and span(184_000) == "3 min 4 s"
    assert span(2 * 3_600_000 + 300_000) == "2 h 5 min" and span(None) == "-"
    assert relative(1_000_000 - 180_000, 1_000_000) == "3 min ago"
    assert relative(1_000_000 + 20_000, 1_000_000) == "in 20 s"
    assert relative("not a time", 0) == "-"
    assert fraction(0.25) == 0.25 and fraction({"done": 3, "of": 4}) == 0.75
    assert fraction({"done": 9, "of": 4}) == 1.0  # clamped
    for other in (40, -0.1, True, {"done": 1, "of": 0}, {"pct": 40}, "half", None):
        assert fraction(other) is None


def test_finished_jobs_show_how_long_they_took(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"n": 1}, job_id="ok")
    [held] = echomq.claim(conn, queue)
    echomq.complete(conn, queue, held.id, held.token, {"ok": True})
    echomq.add(conn, queue, {"n": 2}, job_id="bad", max_attempts=1)
    [held] = echomq.claim(conn, queue)
    echomq.fail(conn, queue, held.id, held.token, "boom")
    web = client(conn)
    for state, job_id in (("completed", "ok"), ("dead", "bad")):
        page = web.get("/queue", params={"queue": queue, "state": state}).text
        row = row_of(page, job_id)
        assert "<th>took</th>" in page and re.search(r'class="n took">\d+ ms<', row), row
        stamp, text = TIME.search(row).groups()  # type: ignore[union-attr]
        assert text.endswith("ago") or text == "now"
        job = echomq.get_job(conn, queue, job_id)
        assert job is not None and job.finished_at is not None
        assert datetime.fromisoformat(stamp) == datetime.fromtimestamp(
            job.finished_at / 1000, tz=UTC)  # the absolute time, on hover
        assert "attempt 1 of" in row
        detail = web.get("/job", params={"queue": queue, "job": job_id}).text
        assert re.search(r'<td id="job-duration">\d+ ms', detail)


DUE_IN_20_MIN = r"in (19 min [1-5]\d s|20 min)"


def test_a_scheduled_job_shows_when_it_is_due(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"n": 1}, job_id="later", delay_ms=20 * 60_000)
    web = client(conn)
    page = web.get("/queue", params={"queue": queue, "state": "scheduled"}).text
    due = re.search(r'<td class="when due">(.*?)</td>', row_of(page, "later"), re.S)
    assert due and TIME.search(due.group(1))
    # "in 20 min", or seconds under it when a loaded machine took them to render the page
    assert re.fullmatch(DUE_IN_20_MIN, TIME.search(due.group(1)).group(2))  # type: ignore[union-attr]
    detail = web.get("/job", params={"queue": queue, "job": "later"}).text
    assert re.search(rf'<td id="job-due"><time [^>]+>{DUE_IN_20_MIN}</time>', detail)
    assert "not tried yet (of 3)" in detail
    echomq.add(conn, queue, {"n": 2}, job_id="again", max_attempts=3)
    [held] = echomq.claim(conn, queue)
    echomq.fail(conn, queue, held.id, held.token, "once", delay_ms=60_000)
    page = web.get("/queue", params={"queue": queue, "state": "scheduled"}).text
    assert "next: attempt 2 of 3" in row_of(page, "again")


def test_a_running_job_shows_elapsed_lease_and_a_progress_bar(
        conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"n": 1}, job_id="run", max_attempts=3)
    [held] = echomq.claim(conn, queue, lease_ms=120_000)
    echomq.report_progress(conn, queue, held.id, held.token, {"done": 3, "of": 4})
    web = client(conn)
    page = web.get("/queue", params={"queue": queue, "state": "active"}).text
    row = row_of(page, "run")
    assert "attempt 1 of 3" in row
    assert re.search(r'class="n elapsed">\d+ ms<', row)
    lease = re.search(r'<td class="when lease">(.*?)</td>', row, re.S)
    assert lease and re.search(r">in (1 min 5\d s|2 min)</time>", lease.group(1))
    assert '<progress value="0.750" max="1">75%</progress>' in row
    assert "style=" not in page  # no inline style: the CSP would refuse it
    detail = web.get("/job", params={"queue": queue, "job": "run"}).text
    assert '<progress id="progress-bar" value="0.750" max="1">' in detail
    assert 'id="job-lease"' in detail and 'id="job-elapsed"' in detail
    echomq.report_progress(conn, queue, held.id, held.token, {"step": "<b>x</b>"})
    page = web.get("/queue", params={"queue": queue, "state": "active"}).text
    assert "<progress" not in row_of(page, "run")  # not a fraction: shown as text
    assert "step" in row_of(page, "run") and "<b>" not in row_of(page, "run")


def test_tries_start_afresh_after_a_dead_letter_retry(conn: Connection, queue: str) -> None:
    """The row's ``attempts`` (the fencing token) only goes up: shown as the count it
    was, a job retried from the dead set read "2/1"."""
    echomq.add(conn, queue, {"n": 1}, job_id="j", max_attempts=1)
    [held] = echomq.claim(conn, queue)
    echomq.fail(conn, queue, held.id, held.token, "first")
    assert echomq.retry_dead(conn, queue, ["j"]) == 1
    web = client(conn)
    pending = web.get("/queue", params={"queue": queue, "state": "pending"}).text
    assert "not tried yet (of 1), retried from dead 1x" in row_of(pending, "j")
    [held] = echomq.claim(conn, queue)
    echomq.fail(conn, queue, held.id, held.token, "second")
    dead = web.get("/queue", params={"queue": queue, "state": "dead"}).text
    row = row_of(dead, "j")
    assert "attempt 1 of 1, retried from dead 1x" in row and "2/1" not in row
    detail = web.get("/job", params={"queue": queue, "job": "j"}).text
    assert re.search(r'id="job-attempts">attempt 1 of 1, retried from dead 1x.*?'
                     r"\(2 claim\(s\) in all\)", detail, re.S)
