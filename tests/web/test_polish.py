"""Issue 26, item 7: an unknown queue is a 404 naming it, a queue page opens on a state
that holds jobs, select-all on the dead letters (a script file, no inline script), tables
in scroll boxes for a phone, a dark theme and a favicon. Through Starlette's test client on
a real Valkey, both executors; the phone width and the select-all click are in
test_browser.py (real Chromium)."""

from __future__ import annotations

import re

import echomq
from echomq.archive import declare
from echomq.queue.connection import Connection
from tests.web.test_routes import HTML, client


def tab_on(page: str) -> str:
    found = re.search(r'class="on" id="tab-([a-z]+)"', page)
    assert found, page
    return found.group(1)


def test_an_unknown_queue_says_so(conn: Connection, queue: str) -> None:
    web = client(conn)
    page = web.get("/queue", params={"queue": queue}, headers=HTML)
    assert page.status_code == 404
    assert f"No queue named “{queue}”" in page.text and 'id="job-list"' not in page.text
    assert web.get("/queue/jobs", params={"queue": queue}).status_code == 404
    assert web.get(f"/queues/{queue}").status_code == 404  # the older path form too
    odd = web.get("/queue", params={"queue": "<b>x</b>"})
    assert odd.status_code == 404 and "<b>x</b>" not in odd.text  # escaped
    # a queue whose jobs all went is still a queue (its sequence stays), and so is a
    # declared one before its first job
    echomq.add(conn, queue, {"n": 1}, job_id="gone")
    echomq.remove_job(conn, queue, "gone")
    assert web.get("/queue", params={"queue": queue}).status_code == 200
    declared = queue + "-declared"
    declare(conn, declared)
    assert web.get("/queue", params={"queue": declared}).status_code == 200


def test_the_queue_page_opens_on_a_state_that_holds_jobs(conn: Connection, queue: str
                                                         ) -> None:
    echomq.add(conn, queue, {"n": 1}, job_id="d", max_attempts=1)
    [held] = echomq.claim(conn, queue)
    echomq.fail(conn, queue, held.id, held.token, "boom")
    web = client(conn)
    page = web.get("/queue", params={"queue": queue}).text
    assert tab_on(page) == "dead" and 'data-job="d"' in page
    # the live list keeps polling the state it opened on
    assert re.search(r'hx-get="/queue/jobs\?queue=[^"]*&amp;state=dead', page)
    echomq.add(conn, queue, {"n": 2}, job_id="later", delay_ms=60_000)
    assert tab_on(web.get("/queue", params={"queue": queue}).text) == "scheduled"
    echomq.add(conn, queue, {"n": 3}, job_id="p")
    assert tab_on(web.get("/queue", params={"queue": queue}).text) == "pending"
    asked = web.get("/queue", params={"queue": queue, "state": "completed"}).text
    assert tab_on(asked) == "completed" and "No completed job." in asked


def test_select_all_on_the_dead_letters_is_a_script_file(conn: Connection, queue: str
                                                          ) -> None:
    for i in range(3):
        echomq.add(conn, queue, {"n": i}, job_id=f"d{i}", max_attempts=1)
        [held] = echomq.claim(conn, queue)
        echomq.fail(conn, queue, held.id, held.token, "boom")
    web = client(conn)
    page = web.get("/queue", params={"queue": queue, "state": "dead"})
    assert 'id="select-all" data-select-all="ids"' in page.text
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page.text, re.S)
    assert scripts and all('src="/static/' in attrs and not body.strip()
                           for attrs, body in scripts)  # no inline script anywhere
    assert '<script src="/static/select.js" defer>' in page.text
    js = web.get("/static/select.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert "data-select-all" in js.text
    csp = page.headers["content-security-policy"]
    script_src = csp.split("script-src")[1].split(";")[0]
    assert "'self'" in script_src and "unsafe-inline" not in script_src
    readonly = client(conn, read_only=True).get("/queue", params={"queue": queue,
                                                                  "state": "dead"}).text
    assert 'id="select-all"' not in readonly


def test_tables_scroll_a_dark_theme_and_a_favicon(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"n": 1})
    web = client(conn)
    page = web.get("/queue", params={"queue": queue}).text
    assert '<div class="scroll">\n<table class="grid" id="job-list">' in page
    overview = web.get("/").text
    assert '<div class="scroll">\n<table class="grid" id="overview">' in overview
    icon = re.search(r'<link rel="icon" type="image/svg\+xml" href="([^"]+)">', overview)
    assert icon and icon.group(1) == "/static/favicon.svg"
    svg = web.get(icon.group(1))
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert svg.text.startswith("<svg") and "<script" not in svg.text
    css = web.get("/static/app.css").text
    dark = css.split("@media (prefers-color-scheme: dark)")[1]
    assert "--bg:" in dark and "--fg:" in dark and ".scroll { overflow-x: auto;" in css
    assert '<meta name="color-scheme" content="light dark">' in overview
