"""The dashboard's actions on issue 10's verbs, through the test client on both
executors: each POST with the page's CSRF token does what its button says."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

import echomq
from echomq.queue.connection import Connection
from echomq.web import create_app
from tests.web.conftest import fill


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page renders no CSRF field"
    return found.group(1)


def dead_letters(conn: Connection, queue: str, n: int) -> list[str]:
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(n)],
                          job_ids=[f"d-{i}" for i in range(n)], max_attempts=1)
    for job in echomq.claim(conn, queue, count=n):
        echomq.fail(conn, queue, job.id, job.token, "boom")
    assert echomq.counts(conn, queue).dead == n
    return ids


def test_pause_and_resume_from_the_queue_page(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=1)
    web = TestClient(create_app(conn))
    page = web.get(f"/queues/{queue}").text
    assert 'class="pause"' in page and 'id="paused"' not in page
    after = web.post(f"/queues/{queue}/pause",
                     data={"csrf": csrf_of(page), "next": f"/queues/{queue}"}).text
    assert echomq.is_paused(conn, queue)
    assert 'id="paused"' in after and f"paused {queue}" in after
    assert "paused" in web.get("/fragments/overview", params={"q": queue}).text
    web.post(f"/queues/{queue}/resume", data={"csrf": csrf_of(after)})
    assert not echomq.is_paused(conn, queue)


def test_retry_one_dead_job_from_its_page(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=0)
    web = TestClient(create_app(conn))
    page = web.get(f"/queues/{queue}/jobs/dead-1").text
    after = web.post(f"/queues/{queue}/jobs/dead-1/retry", data={"csrf": csrf_of(page)}).text
    assert "retried dead-1" in after
    job = echomq.get_job(conn, queue, "dead-1")
    assert job is not None and job.state == "pending"


def test_retry_the_selected_dead_letters(conn: Connection, queue: str) -> None:
    dead_letters(conn, queue, 4)
    web = TestClient(create_app(conn))
    page = web.get(f"/queues/{queue}?state=dead").text
    after = web.post(f"/queues/{queue}/dead", data={
        "csrf": csrf_of(page), "op": "retry", "ids": ["d-1", "d-3"],
        "next": f"/queues/{queue}?state=dead"}).text
    assert "retried 2 dead job(s)" in after
    assert sorted(j.id for j in echomq.list_jobs(conn, queue, "dead")) == ["d-0", "d-2"]


def test_remove_the_selected_dead_letters_then_retry_all(conn: Connection, queue: str) -> None:
    dead_letters(conn, queue, 5)
    web = TestClient(create_app(conn))
    csrf = csrf_of(web.get(f"/queues/{queue}?state=dead").text)
    removed = web.post(f"/queues/{queue}/dead",
                       data={"csrf": csrf, "op": "remove", "ids": ["d-0", "d-4"]}).text
    assert "removed 2 dead job(s)" in removed
    assert echomq.get_job(conn, queue, "d-0") is None
    retried = web.post(f"/queues/{queue}/dead",
                       data={"csrf": csrf, "op": "retry", "scope": "all"}).text
    assert "retried 3 dead job(s)" in retried
    assert echomq.counts(conn, queue).dead == 0 and echomq.counts(conn, queue).pending == 3


def test_promote_a_scheduled_job(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"later": True}, job_id="later", delay_ms=3_600_000)
    web = TestClient(create_app(conn))
    page = web.get(f"/queues/{queue}?state=scheduled").text
    assert "Run now" in page
    after = web.post(f"/queues/{queue}/jobs/later/promote", data={"csrf": csrf_of(page)}).text
    assert "promoted later" in after
    assert echomq.counts(conn, queue).pending == 1


def test_a_refused_verb_says_why(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=0)
    web = TestClient(create_app(conn))
    page = web.get(f"/queues/{queue}/jobs/active-1").text
    after = web.post(f"/queues/{queue}/jobs/active-1/remove", data={"csrf": csrf_of(page)})
    assert after.status_code == 200 and "refused: " in after.text
    assert echomq.get_job(conn, queue, "active-1") is not None


def test_removing_selected_jobs_goes_on_past_a_refused_one(conn: Connection, queue: str) -> None:
    filled = fill(conn, queue, pending=0)
    web = TestClient(create_app(conn))
    csrf = csrf_of(web.get(f"/queues/{queue}?state=dead").text)
    after = web.post(f"/queues/{queue}/dead", data={
        "csrf": csrf, "op": "remove", "ids": [filled.active, filled.dead]}).text
    assert f"removed 1 dead job(s) in {queue}; refused 1 (active-1: " in after
    assert echomq.get_job(conn, queue, filled.dead) is None
    assert echomq.get_job(conn, queue, filled.active) is not None
