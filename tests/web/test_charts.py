"""The dashboard's charts through Starlette's client, on both executors: the settle scripts'
per-minute snapshots, what the charts and their tables show, expiry, the floor's backfill,
and names that try to break out of the SVG."""

from __future__ import annotations

import html
import re
from pathlib import Path

from starlette.testclient import TestClient

import echomq
from echomq.archive import Driver, Floor, declare
from echomq.jobs.settle import complete_cancelled
from echomq.prometheus import BUCKETS_MS
from echomq.queue import charts
from echomq.queue.connection import Connection
from echomq.web import create_app

DAY_MS = 86_400_000


def settle_some(conn: Connection, queue: str) -> None:
    """6 completed, 1 failed and retried, 1 dead, 1 cancelled, then 4 waiting."""
    echomq.add_many(conn, queue, [{"n": i} for i in range(7)])
    jobs = echomq.claim(conn, queue, count=7, lease_ms=60_000)
    for job in jobs[:6]:
        echomq.complete(conn, queue, job.id, job.token, {"ok": True})
    echomq.fail(conn, queue, jobs[6].id, jobs[6].token, "boom", delay_ms=60_000)
    echomq.add(conn, queue, {"n": "dead"}, job_id="d-1", max_attempts=1)
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    echomq.fail(conn, queue, held.id, held.token, "boom")
    echomq.add(conn, queue, {"n": "x"}, job_id="x-1")
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    complete_cancelled(conn, queue, held.id, held.token, "no longer wanted")
    echomq.add_many(conn, queue, [{"n": i} for i in range(4)])  # a backlog of 4


def table(page: str) -> list[list[str]]:
    """The chart table's rows, as cell texts."""
    rows = re.findall(r'<tr class="chart-row">(.*?)</tr>', page, re.S)
    return [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
            for r in rows]


def totals(page: str) -> list[int]:
    """completed, retried, dead, cancelled, summed over the table's rows."""
    return [sum(int(r[i]) for r in table(page)) for i in (1, 2, 3, 4)]


def test_settled_jobs_show_in_the_charts(conn: Connection, queue: str) -> None:
    settle_some(conn, queue)
    web = TestClient(create_app(conn))
    page = web.get("/queue", params={"queue": queue})
    assert page.status_code == 200
    assert totals(page.text) == [6, 1, 1, 1]
    rows = table(page.text)
    if len(rows) == 1:  # the settles fell in one minute: its rates are the whole
        assert rows[0][5] == "25%" and rows[0][10] == "4"  # 2 failed of 8 tried; pending
        assert rows[0][6] != "-" and rows[0][8] != "-"  # run and wait p50 measured
    svg = re.search(r'<svg class="chart" id="chart-finished".*?</svg>', page.text, re.S)
    assert svg and 'role="img"' in svg.group(0) and "<title" in svg.group(0)
    bars = re.findall(r'<g class="bar"[^>]*><title>(.*?)</title>', svg.group(0))
    assert sum(int(n) for b in bars for n in re.findall(r"(\d+) completed", b)) == 6
    assert "url(#chart-finished-hatch)" in svg.group(0)  # retried: hatched, not a colour
    for name in ("day", "week"):  # the coarse levels add the minute not folded yet
        fragment = web.get("/fragments/charts", params={"queue": queue, "range": name})
        assert fragment.status_code == 200 and "<html" not in fragment.text
        assert f'data-range="{name}"' in fragment.text
        assert totals(fragment.text) == [6, 1, 1, 1]
    overview = web.get("/", params={"q": queue}).text
    assert totals(overview) == [6, 1, 1, 1] and 'id="chart-backlog"' in overview
    assert web.get("/queue", params={"queue": queue, "range": "year"}).status_code == 400


def test_snapshots_are_written_once_a_minute_and_expire(conn: Connection, queue: str
                                                        ) -> None:
    assert charts.BUCKETS_MS == BUCKETS_MS  # the charts read Prometheus' histograms
    keys = conn.keys(queue)
    settle_some(conn, queue)
    tip = int(conn.redis.get(keys.chart_tip))
    assert 0 < conn.redis.pttl(keys.chart_tip) <= 8 * DAY_MS
    minute = conn.redis.get(keys.chart("m", tip))
    assert minute.startswith("p ")
    assert 0 < conn.redis.pttl(keys.chart("m", tip)) <= 2 * 3_600_000
    for level, minutes in (("q", 15), ("h", 120)):
        if conn.redis.exists(keys.chart(level, tip // minutes)):  # unless made before
            assert 0 < conn.redis.pttl(keys.chart(level, tip // minutes)) <= 8 * DAY_MS
    settle_some(conn, queue)  # the same minute: the snapshot stays (once, before it)
    if int(conn.redis.get(keys.chart_tip)) == tip:
        assert conn.redis.get(keys.chart("m", tip)) == minute
    # an earlier minute's snapshot: its backlog shows, and the counts after it count
    conn.redis.set(keys.chart("m", tip - 10), "p 9 f:completed 0", px=3_600_000)
    page = TestClient(create_app(conn)).get("/queue", params={"queue": queue}).text
    assert "9" in [r[10] for r in table(page)]
    assert totals(page) == [12, 3, 1, 2]  # d-1 was there: a waiting job failed instead


def test_names_that_try_to_break_out_are_text(conn: Connection, queue: str) -> None:
    evil = queue + '"><script>alert(1)</script><svg/onload=alert(2)>'
    settle_some(conn, evil)
    web = TestClient(create_app(conn))
    for page in (web.get("/queue", params={"queue": evil}).text,
                 web.get("/fragments/charts", params={"queue": evil}).text):
        assert "<script>alert" not in page and "<svg/onload" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # in the charts' titles
        assert totals(page) == [6, 1, 1, 1]


def test_older_points_come_from_the_floor(rconn: Connection, queue: str,
                                          tmp_path: Path) -> None:
    declare(rconn, queue)
    settle_some(rconn, queue)
    with Floor(tmp_path / "floor") as floor:
        Driver(rconn, floor, claim_custody=True).fold(queue)
        keys = rconn.keys(queue)
        rconn.redis.delete(*rconn.redis.keys(keys.pattern.replace("*", "chart:*")))
        web = TestClient(create_app(rconn, floor=floor))
        page = web.get("/queue", params={"queue": queue, "range": "day"}).text
        assert 'id="chart-note"' in page and "archive" in page
        rows = table(page)
        assert {r[11] for r in rows} <= {"archive", "-"} and any(
            r[11] == "archive" for r in rows)
        assert totals(page) == [6, 0, 1, 1]  # the floor keeps no retry
        # without the floor the same chart is empty
        bare = TestClient(create_app(rconn)).get(
            "/queue", params={"queue": queue, "range": "day"}).text
        assert totals(bare) == [0, 0, 0, 0]
