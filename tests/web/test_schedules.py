"""The dashboard's Schedules page (issue 26, item 5), through the test client on both
executors: every schedule with its fires and latest jobs; pause, resume and delete behind
the CSRF token; nothing in read-only mode; names shown as text."""

from __future__ import annotations

import uuid

from starlette.testclient import TestClient

import echomq
from echomq.queue.connection import Connection
from echomq.scheduling.cron import fire_queue
from echomq.web import create_app
from tests.web.test_actions import csrf_of

EVERY_MINUTE = "* * * * *"


def test_a_schedule_is_listed_with_its_fires_and_latest_jobs(conn: Connection, queue: str
                                                             ) -> None:
    stored = echomq.schedule(conn, queue, "nightly", EVERY_MINUTE, {"x": 1})
    at = stored.created_at // 60_000 * 60_000 + 60_000
    [job_id] = fire_queue(conn, queue, now=at)
    page = TestClient(create_app(conn)).get("/schedules").text
    row = page.split(f'data-schedule="{queue}/nightly"')[1].split("</tr>")[0]
    assert "<code>* * * * *</code>" in row and "ago" in row and "in " in row
    assert f"{job_id}</a> <span class=\"badge state-pending\">pending</span>" in row
    assert 'href="/schedules"' in page and 'class="pause"' in row
    echomq.unschedule(conn, queue, "nightly")


def test_pause_resume_and_delete_from_the_page(conn: Connection, queue: str) -> None:
    echomq.schedule(conn, queue, "tick", EVERY_MINUTE, None)
    web = TestClient(create_app(conn))
    csrf = csrf_of(web.get("/schedules").text)
    form = {"csrf": csrf, "queue": queue, "name": "tick", "next": "/schedules"}
    after = web.post("/schedules/pause", data=form).text
    assert f"paused schedule tick of {queue}" in after
    assert echomq.schedules(conn, queue)[0].paused
    row = after.split(f'data-schedule="{queue}/tick"')[1].split("</tr>")[0]
    assert "badge paused" in row and 'class="resume"' in row
    assert "was paused already" in web.post("/schedules/pause", data=form).text
    assert f"resumed schedule tick of {queue}" in web.post("/schedules/resume", data=form).text
    assert not echomq.schedules(conn, queue)[0].paused
    assert f"deleted schedule tick of {queue}" in web.post("/schedules/delete", data=form).text
    assert echomq.schedules(conn, queue) == []
    gone = web.post("/schedules/pause", data=form).text
    assert "refused: ScheduleGone: no cron schedule" in gone


def test_an_action_without_the_csrf_token_or_in_read_only_mode_is_refused(
        conn: Connection, queue: str) -> None:
    echomq.schedule(conn, queue, "tick", EVERY_MINUTE, None)
    form = {"queue": queue, "name": "tick"}
    for action in ("pause", "delete"):
        answer = TestClient(create_app(conn)).post(f"/schedules/{action}", data=form)
        assert answer.status_code == 403 and "CSRF" in answer.text
    frozen = TestClient(create_app(conn, read_only=True))
    page = frozen.get("/schedules").text
    assert f'data-schedule="{queue}/tick"' in page and "/schedules/pause" not in page
    csrf = csrf_of(TestClient(create_app(conn)).get("/schedules").text)
    answer = frozen.post("/schedules/pause", data={**form, "csrf": csrf})
    assert answer.status_code == 403 and "read-only" in answer.text
    assert not echomq.schedules(conn, queue)[0].paused
    assert echomq.unschedule(conn, queue, "tick")  # still there: nothing deleted


def test_schedule_and_queue_names_show_as_text(conn: Connection) -> None:
    queue = f"<script>alert('q{uuid.uuid4().hex[:6]}')</script>"
    name = "<img/src=x/onerror=alert(1)>"
    echomq.schedule(conn, queue, name, EVERY_MINUTE, None)
    try:
        page = TestClient(create_app(conn)).get("/schedules").text
        assert queue not in page and name not in page
        assert "&lt;img/src=x/onerror=alert(1)&gt;" in page
        assert queue.replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#39;") in page
    finally:
        echomq.unschedule(conn, queue, name)
