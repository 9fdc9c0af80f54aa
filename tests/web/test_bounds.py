"""Bounded pages (issue 20, item 9): what one request renders does not grow with the
keyspace. Asserted by content (rows, bytes), never by time, through the test client
against a real Valkey and a real floor."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import echomq
from echomq.archive import Driver, Floor, declare
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys
from tests.support.waits import wait_until
from tests.web.test_routes import client

QUEUES = 3000


@pytest.fixture
def private(server_url: str) -> Iterator[Connection]:
    """A connection under a prefix of its own: only this test's queues are listed."""
    conn = echomq.connect(server_url, prefix=f"bounds-{uuid.uuid4().hex[:8]}")
    yield conn
    keys = list(conn.redis.scan_iter(match=conn.prefix + ":*", count=5000))
    for at in range(0, len(keys), 1000):
        conn.redis.delete(*keys[at:at + 1000])
    conn.close()


def rows(page: str) -> list[str]:
    return re.findall(r'<tr data-queue="([^"]+)">', page)


def test_the_overview_shows_one_page_of_many_queues(private: Connection) -> None:
    names = [f"q{i:04d}" for i in range(QUEUES)]
    pipe = private.redis.pipeline(transaction=False)
    for name in names:  # as echomq.add would leave them, without 3,000 round trips
        pipe.zadd(private.keys(name).pending, {"j": 1})
    pipe.execute()
    web = client(private)
    first = wait_until(lambda: (p := web.get("/")) and f"of {QUEUES}" in p.text and p,
                       timeout=60, step=0.5)
    assert first.status_code == 200
    assert rows(first.text) == names[:50]
    assert f"queues 1–50 of {QUEUES}" in first.text
    assert len(first.content) < 150_000  # 3,000 rows were about 2 MB
    assert 'id="next"' in first.text and 'id="prev"' not in first.text
    fragment = web.get("/fragments/overview", params={"page": "2"})
    assert rows(fragment.text) == names[100:150] and len(fragment.content) < 120_000
    last = web.get("/", params={"page": "59"})
    assert rows(last.text) == names[2950:] and 'id="next"' not in last.text
    assert rows(web.get("/", params={"page": "999999999"}).text) == names[2950:]
    for odd in ("-1", "٣", "9" * 5000, "x"):  # not ASCII digits: the first page
        assert rows(web.get("/", params={"page": odd}).text) == names[:50]
    found = web.get("/", params={"q": "q29"})  # a filter, then paged
    assert rows(found.text) == names[2900:2950] and "of 100 whose name holds" in found.text
    polled = re.search(r'hx-get="([^"]+)"', found.text)
    assert polled and "q=q29" in polled.group(1)  # the poll keeps the filter and the page
    assert rows(web.get(html.unescape(polled.group(1))).text) == names[2900:2950]


def test_a_job_page_shows_one_page_of_its_archived_outcomes(
        rconn: Connection, queue: str, tmp_path: Path) -> None:
    declare(rconn, queue)
    pipe = rconn.redis.pipeline(transaction=False)
    for i in range(130):  # one job settled 130 times, as the queue's Lua records it
        pipe.xadd(Keys(queue).completions, {
            "job": "j-1", "outcome": "dead", "result": f"boom {i}", "attempts": "1",
            "at": str(1_700_000_000_000 + i), "created_at": "1700000000000"})
    pipe.execute()
    with Floor(tmp_path / "floor") as floor:
        Driver(rconn, floor).fold(queue)
        assert len(floor.history(queue, "j-1")) == 130
        web = client(rconn, floor)

        def page(n: int | None) -> tuple[list[str], str]:
            params = {"queue": queue, "job": "j-1"} | ({"outcomes": str(n)} if n else {})
            answer = web.get("/job", params=params)
            assert answer.status_code == 200
            shown = re.search(r'<table class="grid" id="history">(.*?)</table>',
                              answer.text, re.S)
            assert shown
            return re.findall(r"boom (\d+)", shown.group(1)), answer.text

        first, text = page(None)
        assert first == [str(i) for i in range(50)] and 'id="history-next"' in text
        assert "outcomes 1–50, oldest first" in text and len(text) < 60_000
        second, _ = page(1)
        assert second == [str(i) for i in range(50, 100)]
        third, text = page(2)
        assert third == [str(i) for i in range(100, 130)]
        assert 'id="history-next"' not in text and 'id="history-prev"' in text


@pytest.mark.parametrize("value", [
    "9" * 400, "1" + "0" * 30, "٣", "١٧٠٠٠٠٠٠٠٠٠٠٠", "2025-01-3١", "2025-01-31T12:00:00٣",
    "99999-01-01", "2025-13-45", "x" * 5000,
])
@pytest.mark.parametrize("field", ["since", "until"])
def test_an_audit_time_out_of_range_is_a_clear_400(
        rconn: Connection, queue: str, tmp_path: Path, field: str, value: str) -> None:
    declare(rconn, queue)
    with Floor(tmp_path / "floor") as floor:
        web = client(rconn, floor)
        answer = web.get("/archive", params={"queue": queue, field: value})
        assert answer.status_code == 400
        error = re.search(r'<p class="error">([^<]*)</p>', answer.text)
        assert error and error.group(1).startswith(f"{field}: ")
        assert len(error.group(1)) < 200
        fine = web.get("/archive", params={"queue": queue, field: "1700000000000"})
        assert fine.status_code == 200 and 'id="audit"' in fine.text


def test_the_archive_page_shows_one_page_of_queues(private: Connection, tmp_path: Path
                                                   ) -> None:
    names = [f"a{i:03d}" for i in range(120)]
    for name in names:
        declare(private, name)
    with Floor(tmp_path / "floor") as floor:
        web = client(private, floor)
        first = web.get("/archive")
        assert first.status_code == 200 and rows(first.text) == names[:50]
        assert "queues 1–50 of 120" in first.text and 'id="next"' in first.text
        last = web.get("/archive", params={"page": "2"})
        assert rows(last.text) == names[100:] and 'id="next"' not in last.text
        found = web.get("/archive", params={"page": "1", "queue": "a007"})
        assert rows(found.text) == names[50:100] and 'id="audit"' in found.text
