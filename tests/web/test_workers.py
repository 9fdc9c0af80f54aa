"""The dashboard's Workers page (issue 26, item 4), through the test client on both
executors: a live Consumer with what it holds, a gone worker with what became of its
jobs, names shown as text."""

from __future__ import annotations

import os
import threading
import time

from starlette.testclient import TestClient

import echomq
from echomq.queue.connection import Connection
from echomq.web import create_app
from echomq.worker.heartbeat import Heartbeat
from tests.support.consumers import ConsumerThreads
from tests.support.waits import wait_until


def test_the_workers_page_lists_a_live_consumer_and_what_it_holds(
        conn: Connection, queue: str) -> None:
    release = threading.Event()
    threads = ConsumerThreads(conn, queue, poll_ms=20, beat_ms=50, concurrency=2)
    consumer = threads.start(lambda job: release.wait(10))
    web = TestClient(create_app(conn))
    try:
        job_id = echomq.add(conn, queue, {"n": 1}, job_id="held-1")
        wait_until(lambda: any(w.held_count for w in echomq.workers(conn, queue)))
        page = web.get("/workers", params={"queue": queue})
        assert page.status_code == 200 and 'href="/workers"' in page.text
        assert consumer.heartbeat is not None
        assert f'data-worker="{consumer.heartbeat.id}" class="alive"' in page.text
        assert f"<td class=\"n\">{os.getpid()}" in page.text and job_id in page.text
        assert "?queue=" + queue + "&amp;job=held-1" in page.text
        rows = web.get("/fragments/workers", params={"queue": queue}).text
        assert consumer.heartbeat.id in rows and "<html" not in rows
    finally:
        release.set()
        threads.stop_all()
    assert "No worker beat lately" in web.get("/workers", params={"queue": queue}).text


def test_a_gone_worker_shows_its_jobs_as_they_are_now_and_names_as_text(
        conn: Connection, queue: str) -> None:
    held, recovered = (echomq.add(conn, queue, {"n": i}) for i in range(2))
    jobs = {j.id: j for j in echomq.claim(conn, queue, count=2, lease_ms=60_000)}
    echomq.release_many(conn, queue, [(recovered, jobs[recovered].token)])  # handed back
    record = Heartbeat(conn, [queue], 4, beat_ms=20)
    script = "<script>alert('task')</script>"
    record.describe(tasks=[script], kind="worker")
    record.host = "<img src=x onerror=alert('host')>"
    record.beat([(queue, j.id, j.token) for j in jobs.values()])
    time.sleep(0.1)  # 5 beats missed: gone
    page = web_page(conn, queue)
    assert f'data-worker="{record.id}" class="gone"' in page
    assert "&lt;script&gt;alert(&#39;task&#39;)&lt;/script&gt;" in page and script not in page
    assert "&lt;img src=x" in page and "<img" not in page
    row = page.split(f'data-worker="{record.id}"')[1].split("</tr>")[0]
    assert f"{held}</a> <span class=\"badge state-active\"" in row and "active (held)" in row
    assert f"{recovered}</a> <span class=\"badge state-pending\"" in row
    record.leave()
    assert record.id not in web_page(conn, queue)


def web_page(conn: Connection, queue: str) -> str:
    return TestClient(create_app(conn)).get("/workers", params={"queue": queue}).text


def test_a_bad_queue_filter_is_refused(conn: Connection) -> None:
    answer = TestClient(create_app(conn)).get("/workers", params={"queue": "a:b"})
    assert answer.status_code == 400 and "contains ':'" in answer.text
