"""The dashboard's routes through Starlette's test client, against a real Valkey and a
real floor: what a visitor sees, what a visitor may do, and what is refused."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

import echomq
from echomq.archive import Driver, Floor, declare
from echomq.queue.connection import Connection
from echomq.queue.events import channel
from echomq.web import create_app
from tests.support.waits import wait_until
from tests.web.conftest import fill

HTML = {"accept": "text/html"}


@pytest.fixture
def floor(tmp_path: Path) -> Iterator[Floor]:
    with Floor(tmp_path / "floor") as opened:
        yield opened


def client(conn: Connection, floor: Floor | None = None, **options: object) -> TestClient:
    return TestClient(create_app(conn, floor=floor, **options))  # type: ignore[arg-type]


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page renders no CSRF field"
    return found.group(1)


def test_the_overview_lists_a_queue_with_its_counts(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=3)
    web = client(conn)
    page = web.get("/", params={"q": queue})  # one page of 50: other tests' queues too
    assert page.status_code == 200
    row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', page.text, re.S)
    assert row, page.text
    numbers = re.findall(r'<td class="n">(?:<a [^>]*>)?(\d+)', row.group(1))
    assert numbers[:5] == ["3", "0", "1", "1", "1"]  # pending scheduled active completed dead
    assert 'hx-trigger="every 2s"' in page.text  # the counts refresh live
    fragment = web.get("/fragments/overview", params={"q": queue})
    assert f'data-queue="{queue}"' in fragment.text and "<html" not in fragment.text


def test_a_queue_page_is_paged_newest_first(conn: Connection, queue: str) -> None:
    added = echomq.add_many(conn, queue, [{"n": i} for i in range(120)])
    web = client(conn)
    first = web.get(f"/queues/{queue}?state=pending")
    ids = re.findall(r'<tr data-job="([^"]+)"', first.text)
    assert len(ids) == 50
    assert ids == added[::-1][:50]
    last = web.get(f"/queues/{queue}?state=pending&page=2")
    assert len(re.findall(r'<tr data-job=', last.text)) == 20
    assert "page 3 of 3" in last.text and 'id="older"' not in last.text
    tabs = re.findall(r'id="tab-([a-z]+)"', last.text)
    assert tabs == ["pending", "scheduled", "active", "completed", "dead", "waiting"]
    assert set(ids).isdisjoint(re.findall(r'<tr data-job="([^"]+)"', last.text))
    assert web.get(f"/queues/{queue}?state=nonsense").status_code == 400
    assert web.get("/queues/bad:name").status_code == 400


def test_user_text_is_rendered_as_text(conn: Connection, queue: str) -> None:
    fill(conn, queue, payload={"html": "<script>alert(1)</script>"},
         error="<script>alert(2)</script>")
    web = client(conn)
    for url in (f"/queues/{queue}/jobs/dead-1", f"/queues/{queue}?state=dead"):
        response = web.get(url)
        assert "script-src 'self' 'unsafe-eval'" in response.headers["content-security-policy"]
        assert response.headers["x-frame-options"] == "DENY"
        page = response.text
        assert "<script>alert" not in page
        assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page


def test_a_token_is_needed_for_every_request(conn: Connection, queue: str) -> None:
    fill(conn, queue)
    web = client(conn, token="s3cret")
    assert web.get("/", headers=HTML, follow_redirects=False).headers["location"] == "/login"
    assert web.get(f"/queues/{queue}").status_code == 401
    assert web.get("/", headers={"authorization": "Bearer nope"}).status_code == 401
    assert web.get("/", headers={"authorization": "Bearer s3cret"}).status_code == 200
    assert web.get("/login").status_code == 200  # the form itself is open
    assert web.post("/login", data={"token": "wrong"}).status_code == 401
    done = web.post("/login", data={"token": "s3cret"}, follow_redirects=False)
    assert done.status_code == 303
    cookie = done.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert "s3cret" not in cookie  # the cookie proves the token, it does not hold it
    assert web.get(f"/queues/{queue}").status_code == 200


def test_an_action_without_the_csrf_token_is_refused(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=2)
    web = client(conn)
    page = web.get(f"/queues/{queue}")
    url = f"/queues/{queue}/jobs/p-0/remove"
    assert web.post(url).status_code == 403
    assert web.post(url, data={"csrf": "forged"}).status_code == 403
    assert echomq.get_job(conn, queue, "p-0") is not None
    done = web.post(url, data={"csrf": csrf_of(page.text)}, follow_redirects=False)
    assert done.status_code == 303
    assert echomq.get_job(conn, queue, "p-0") is None
    with_header = web.post(f"/queues/{queue}/jobs/p-1/remove",
                           headers={"x-csrf-token": csrf_of(page.text)},
                           follow_redirects=False)
    assert with_header.status_code == 303 and echomq.get_job(conn, queue, "p-1") is None


def test_read_only_hides_and_refuses_every_action(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=1)
    web = client(conn, read_only=True)
    for url in ("/", f"/queues/{queue}?state=dead", f"/queues/{queue}/jobs/dead-1"):
        page = web.get(url).text
        assert 'method="post"' not in page and 'id="read-only"' in page
    csrf = web.cookies["emq_csrf"]
    for url in (f"/queues/{queue}/jobs/p-0/remove", f"/queues/{queue}/pause",
                f"/queues/{queue}/dead"):
        assert web.post(url, data={"csrf": csrf, "op": "retry", "scope": "all"}
                        ).status_code == 403
    assert echomq.get_job(conn, queue, "p-0") is not None


def test_a_purged_job_is_found_in_the_archive(rconn: Connection, queue: str,
                                              floor: Floor) -> None:
    declare(rconn, queue)
    fill(rconn, queue, record=True, error="disk full")
    Driver(rconn, floor, claim_custody=True).fold(queue)
    assert echomq.purge(rconn, queue, "dead") == 1
    assert echomq.get_job(rconn, queue, "dead-1") is None
    web = client(rconn, floor)
    page = web.get(f"/queues/{queue}/jobs/dead-1")
    assert page.status_code == 200
    assert 'id="from-archive"' in page.text and "From the archive" in page.text
    assert "disk full" in page.text
    live = web.get(f"/queues/{queue}/jobs/done-1").text
    assert 'id="from-archive"' not in live and "completed" in live
    assert web.get(f"/queues/{queue}/jobs/never").status_code == 404


def test_the_archive_page_shows_each_queue_and_searches_the_audit(
        rconn: Connection, queue: str, floor: Floor) -> None:
    declare(rconn, queue)
    fill(rconn, queue, record=True)
    Driver(rconn, floor, claim_custody=True).fold(queue)
    web = client(rconn, floor)
    page = web.get("/archive", params={"q": queue}).text
    row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', page, re.S)
    assert row and floor.checkpoint(queue) in row.group(1)
    dead = web.get("/archive", params={"queue": queue, "outcome": "dead"}).text
    assert "dead-1" in dead and "done-1" not in dead
    one = web.get("/archive", params={"queue": queue, "job": "done-1"}).text
    assert "done-1" in one and "dead-1" not in one
    late = web.get("/archive", params={"queue": queue, "since": "2999-01-01T00:00:00"}).text
    assert "No archived outcome matches" in late
    bad = web.get("/archive", params={"queue": queue, "since": "yesterday"}).text
    assert "neither ms nor an ISO 8601 time" in bad
    assert client(rconn).get("/archive").status_code == 404  # no floor, no archive page


def test_the_dashboard_mounts_inside_another_app(rconn: Connection, queue: str) -> None:
    fill(rconn, queue, pending=1)
    host = Starlette(routes=[Mount("/ops", app=create_app(rconn, token="t"))])
    web = TestClient(host)
    assert web.get("/ops/", headers=HTML, follow_redirects=False
                   ).headers["location"] == "/ops/login"
    done = web.post("/ops/login", data={"token": "t"}, follow_redirects=False)
    assert done.headers["location"] == "/ops/" and "Path=/ops/" in done.headers["set-cookie"]
    page = web.get("/ops/", params={"q": queue}).text
    assert f'href="/ops/queue?queue={queue}"' in page and "/ops/static/htmx.min.js" in page
    assert web.get("/ops/static/htmx.min.js").status_code == 200


def test_the_overview_shows_throughput_and_failure_rate(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=0)  # one completed and one dead, just now
    page = client(conn).get("/", params={"q": queue}).text
    row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', page, re.S)
    assert row
    cells = re.findall(r'<td class="n">([^<]*)</td>', row.group(1))
    assert cells[-6:] == ["2.0", "0.4", "0.1", "50%", "50%", "50%"]


def test_nothing_polls_faster_than_once_a_second(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=1)
    web = client(conn)
    for url in ("/", f"/queues/{queue}?state=dead", f"/queues/{queue}/jobs/dead-1"):
        for seconds in re.findall(r'hx-trigger="every ([0-9.]+)s', web.get(url).text):
            assert float(seconds) >= 1, url


def test_cancel_signals_a_running_job(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=0)
    web = client(conn)
    csrf = csrf_of(web.get(f"/queues/{queue}/jobs/active-1").text)
    pubsub = conn.redis.pubsub()
    pubsub.subscribe(channel(conn, queue))
    try:
        assert wait_until(lambda: pubsub.get_message(timeout=0.1))["type"] == "subscribe"
        done = web.post(f"/queues/{queue}/jobs/active-1/cancel", data={"csrf": csrf})
        assert f"cancel active-1 in {queue}: signalled" in done.text
        heard = wait_until(lambda: pubsub.get_message(timeout=0.1))
        assert "active-1" in heard["data"] and "cancel" in heard["data"]
    finally:
        pubsub.close()


def test_remove_all_dead_letters(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=1)
    web = client(conn)
    csrf = csrf_of(web.get(f"/queues/{queue}?state=dead").text)
    done = web.post(f"/queues/{queue}/dead", data={"csrf": csrf, "op": "remove",
                                                   "scope": "all"})
    assert "removed 1 dead job(s)" in done.text
    assert echomq.counts(conn, queue).dead == 0


def test_an_odd_job_id_has_its_page(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"odd": True}, job_id="a/b?c#d%e")
    web = client(conn)
    listing = web.get(f"/queues/{queue}").text
    link = re.search(r'<a href="([^"]+)">a/b\?c#d%e</a>', listing)
    assert link, listing
    page = web.get(html.unescape(link.group(1)))
    assert page.status_code == 200 and '<h1>Job <span class="name">a/b?c#d%e</span>' in page.text
    remove = re.search(r'action="([^"]+/remove)"[^>]*>(.*?)</form>', page.text, re.S)
    assert remove, page.text
    fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', remove.group(2)))
    assert fields["job"] == "a/b?c#d%e" and fields["queue"] == queue  # in the body
    done = web.post(remove.group(1), data=fields, follow_redirects=False)
    assert done.status_code == 303 and echomq.get_job(conn, queue, "a/b?c#d%e") is None


def test_a_running_job_shows_its_progress(conn: Connection, queue: str) -> None:
    filled = fill(conn, queue, pending=0)
    echomq.report_progress(conn, queue, filled.active, filled.active_token,
                           {"pct": 40, "step": "<b>resize</b>"})
    page = client(conn).get(f"/queues/{queue}/jobs/{filled.active}").text
    shown = re.search(r'<pre id="progress">(.*?)</pre>', page, re.S)
    assert shown and "&#34;pct&#34;: 40" in shown.group(1)
    assert "&lt;b&gt;resize&lt;/b&gt;" in shown.group(1)


def test_the_archive_page_shows_the_lag_behind_the_stream(
        rconn: Connection, queue: str, floor: Floor) -> None:
    declare(rconn, queue)
    fill(rconn, queue, pending=1, record=True)
    Driver(rconn, floor, claim_custody=True).fold(queue)
    web = client(rconn, floor)

    def lag() -> list[str]:
        page = web.get("/archive", params={"q": queue}).text  # a shared floor has many
        row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', page, re.S)
        assert row
        return re.findall(r'<td class="n">([^<]*)</td>', row.group(1))

    assert lag()[:3] == ["2", "0", "0s"]  # entries, lag in entries, lag in time
    job = echomq.claim(rconn, queue)[0]
    echomq.complete(rconn, queue, job.id, job.token, "late", record=True)
    time.sleep(1.1)
    entries, behind, age = lag()[:3]
    assert (entries, behind) == ("2", "1") and age.endswith("s") and float(age[:-1]) >= 1
    Driver(rconn, floor, claim_custody=True).fold(queue)
    assert lag()[:3] == ["3", "0", "0s"]


def test_a_declared_queue_is_listed_before_it_has_a_job(rconn: Connection, queue: str) -> None:
    declare(rconn, queue)
    page = client(rconn).get("/", params={"q": queue}).text
    assert f'<tr data-queue="{queue}">' in page


def test_metrics_are_served_behind_the_token(rconn: Connection, queue: str) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    fill(rconn, queue, pending=2)
    web = client(rconn, token="t")
    assert web.get("/metrics").status_code == 401
    scrape = web.get("/metrics", headers={"authorization": "Bearer t"})
    assert scrape.status_code == 200 and scrape.headers["content-type"].startswith("text/plain")
    jobs = {s.labels["state"]: s.value for f in text_string_to_metric_families(scrape.text)
            if f.name == "echomq_jobs" for s in f.samples if s.labels.get("queue") == queue}
    assert jobs["pending"] == 2 and jobs["dead"] == 1


def test_a_job_page_lists_its_errors_and_log_lines_escaped(
        conn: Connection, queue: str) -> None:
    job_id = echomq.add(conn, queue, 1, max_attempts=3)
    for attempt in (1, 2):
        [held] = echomq.claim(conn, queue, lease_ms=60_000)
        echomq.append_log(conn, queue, job_id, held.token, f"<script>log {attempt}</script>")
        try:
            raise ValueError(f"<img src=x onerror=alert({attempt})>")
        except ValueError as exc:
            echomq.fail(conn, queue, job_id, held.token, exc, delay_ms=0)
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    echomq.complete(conn, queue, job_id, held.token, "<b>done</b>")
    page = client(conn).get(f"/queues/{queue}/jobs/{job_id}").text
    errors = re.search(r'<table class="grid" id="errors">(.*?)</table>', page, re.S)
    logs = re.search(r'<table class="grid" id="logs">(.*?)</table>', page, re.S)
    assert errors and logs, page
    rows = re.findall(r"<tr><td>.*?</tr>", errors.group(1), re.S)
    assert len(rows) == 2 and "<img" not in errors.group(1)
    assert "&lt;img src=x onerror=alert(1)&gt;" in rows[0]
    assert "ValueError" in rows[1] and "Traceback (most recent call last)" in rows[1]
    assert "<script>" not in logs.group(1)
    assert logs.group(1).count("&lt;script&gt;log ") == 2
    result = re.search(r'<pre id="result">(.*?)</pre>', page, re.S)
    assert result and result.group(1) == "&#34;&lt;b&gt;done&lt;/b&gt;&#34;"


def test_a_cancelled_jobs_page_shows_its_reason(conn: Connection, queue: str) -> None:
    from echomq.jobs.settle import complete_cancelled

    job_id = echomq.add(conn, queue, 1)
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    complete_cancelled(conn, queue, job_id, held.token, "<i>enough</i>")
    page = client(conn).get(f"/queues/{queue}/jobs/{job_id}").text
    assert '<pre id="result">-</pre>' in page
    assert '<p id="cancel-reason">Cancelled: &lt;i&gt;enough&lt;/i&gt;</p>' in page
    assert "No failed attempt." in page and "No log line." in page


def test_a_forgotten_jobs_page_shows_its_archived_errors_and_log_lines(
        rconn: Connection, queue: str, floor: Floor) -> None:
    declare(rconn, queue)
    job_id = echomq.add(rconn, queue, 1, max_attempts=1)
    [held] = echomq.claim(rconn, queue, lease_ms=60_000)
    echomq.append_log(rconn, queue, job_id, held.token, "<u>about to fail</u>")
    echomq.fail(rconn, queue, job_id, held.token, ValueError("<em>disk</em> full"))
    Driver(rconn, floor, claim_custody=True).fold(queue)
    assert echomq.purge(rconn, queue, "dead") == 1
    page = client(rconn, floor).get(f"/queues/{queue}/jobs/{job_id}").text
    assert 'id="from-archive"' in page
    debug = re.search(r'<tr class="archived-debug">(.*?)</tr>', page, re.S)
    assert debug and "1 error(s), 1 log line(s)" in debug.group(1)
    assert "&lt;em&gt;disk&lt;/em&gt; full" in debug.group(1) and "<em>" not in debug.group(1)
    assert "&lt;u&gt;about to fail&lt;/u&gt;" in debug.group(1)
