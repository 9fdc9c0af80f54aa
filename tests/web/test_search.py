"""The search page through Starlette's test client, on a real Valkey and a real floor:
live jobs by id, name, state and time, by payload in bounded pages; the archive with the
same form; the SQL box, its limits and each way it refuses to reach the host."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import echomq
from echomq.archive import Driver, Floor, declare
from echomq.queue.connection import Connection
from echomq.web import create_app, search_archive, search_live, sql_box
from tests.web.conftest import fill

TOKEN = "search-token"
BEARER = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def floor(tmp_path: Path) -> Iterator[Floor]:
    with Floor(tmp_path / "floor") as opened:
        yield opened


def hits(page: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)"', page)


def scanned(page: str) -> str:
    found = re.search(r'id="search-scanned">(.*?)</p>', page, re.S)
    assert found, page
    return " ".join(found.group(1).split())


def next_link(page: str) -> str | None:
    found = re.search(r'id="search-next" href="([^"]+)"', page)
    return found.group(1).replace("&amp;", "&") if found else None


def test_live_jobs_by_id_name_state_and_time(conn: Connection, queue: str) -> None:
    fill(conn, queue, pending=2)
    echomq.add(conn, queue, {"n": "named"}, job_id="mail-1", name="send_mail")
    uniq = f"only-{uuid.uuid4().hex[:8]}"
    echomq.add(conn, queue, {"n": "uniq"}, job_id=uniq)
    web = TestClient(create_app(conn))
    page = web.get("/search", params={"queue": queue, "id": "dead-1"})
    assert page.status_code == 200 and hits(page.text) == ["dead-1"]
    assert 'id="nav-search"' in page.text
    url: str | None = "/search?" + f"id={uniq}"  # no queue: every queue, page by page
    found: list[str] = []
    for _ in range(50):
        assert url is not None, "the id was not found in any queue"
        page = web.get(url)
        found = hits(page.text)
        if found:
            break
        url = next_link(page.text)
    assert found == [uniq] and f"<td>{queue}</td>" in page.text
    page = web.get("/search", params={"queue": queue, "state": "pending", "name": "mail"})
    assert hits(page.text) == ["mail-1"]
    assert scanned(page.text).startswith("scanned 4 of 4 jobs in pending")
    done = web.get("/search", params={"queue": queue, "state": "completed",
                                      "time_of": "finished", "since": "2000-01-01"})
    assert hits(done.text) == ["done-1"]
    later = web.get("/search", params={"queue": queue, "state": "completed",
                                       "time_of": "finished", "since": "2999-01-01"})
    assert hits(later.text) == [] and "scanned 0 of 0" in scanned(later.text)
    created = web.get("/search", params={"queue": queue, "state": "pending",
                                         "until": "2000-01-01"})
    assert hits(created.text) == []
    fragment = web.get("/search/results", params={"queue": queue, "id": "dead-1"})
    assert hits(fragment.text) == ["dead-1"] and "<html" not in fragment.text
    bad = web.get("/search", params={"queue": queue, "state": "nonsense"})
    assert bad.status_code == 400 and "state must be one of" in bad.text
    assert web.get("/search", params={"queue": "bad:name"}).status_code == 400


def test_a_payload_search_pages_past_the_scan_bound(conn: Connection, queue: str) -> None:
    """2,100 pending jobs, two matching: the first page reads 1,000 (the bound) and says
    so; following its cursor finds the other, and the last page has no next."""
    total = search_live.SCAN_BOUND * 2 + 100
    payloads = [{"n": i, "to": "needle@example.com" if i in (5, 1500) else "x"}
                for i in range(total)]
    ids = echomq.add_many(conn, queue, payloads)
    web = TestClient(create_app(conn))
    page = web.get("/search", params={"queue": queue, "state": "pending",
                                      "payload": "needle@", "match": "text"})
    assert hits(page.text) == [ids[1500]]
    assert scanned(page.text).startswith(f"scanned 1000 of {total} jobs in pending "
                                         "(positions 1–1000)")
    found, pages, url = list(hits(page.text)), 1, next_link(page.text)
    while url is not None:
        page = web.get(url)
        found += hits(page.text)
        pages += 1
        url = next_link(page.text)
    assert found == [ids[1500], ids[5]] and pages == 3
    assert scanned(page.text).startswith(f"scanned 100 of {total} jobs in pending")
    by_key = web.get("/search", params={"queue": queue, "state": "pending",
                                        "payload": "to=needle@example.com", "match": "json",
                                        "start": "2000"})
    assert hits(by_key.text) == [ids[5]]
    assert web.get("/search", params={"queue": queue, "payload": "no-equals",
                                      "match": "json"}).status_code == 400


def test_search_text_and_payloads_show_as_text(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"x": "<script>alert(3)</script>"}, job_id="<b>x</b>",
               name="<i>n</i>")
    web = TestClient(create_app(conn))
    page = web.get("/search", params={"queue": queue, "payload": "<script>",
                                      "name": "<i>", "since": "<img src=x>"})
    assert page.status_code == 400 and "<img src=x>" not in page.text
    page = web.get("/search", params={"queue": queue, "payload": "<script>alert(3)",
                                      "name": "<i>"})
    assert "<script>alert" not in page.text and "<b>x</b>" not in page.text
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in page.text
    assert 'data-job="&lt;b&gt;x&lt;/b&gt;"' in page.text
    echomq.add(conn, queue, {"city": "Zürich \"old\" town"}, job_id="zh")
    page = web.get("/search", params={"queue": queue, "payload": 'Zürich "old"'})
    assert hits(page.text) == ["zh"] and "u00fc" not in page.text  # stored as \u00fc


def test_the_archive_with_the_same_form(rconn: Connection, queue: str, floor: Floor,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    declare(rconn, queue, payload=True)
    fill(rconn, queue, pending=0, record=True, payload={"card": "<script>x</script> 4242"})
    Driver(rconn, floor, claim_custody=True).fold(queue)
    web = TestClient(create_app(rconn, floor=floor))
    base = {"where": "archive", "queue": queue}
    assert hits(web.get("/search", params={**base, "id": "dead-1"}).text) == ["dead-1"]
    assert hits(web.get("/search", params={**base, "outcome": "dead"}).text) == ["dead-1"]
    paid = web.get("/search", params={**base, "payload": "4242"})
    assert hits(paid.text) == ["dead-1"] and "&lt;script&gt;x" in paid.text
    assert hits(web.get("/search", params={**base, "since": "2999-01-01"}).text) == []
    monkeypatch.setattr(search_archive, "SCAN_BOUND", 1)  # two outcomes: a page each
    first = web.get("/search", params=base)
    assert len(hits(first.text)) == 1 and "scanned 1 outcomes of 2" in scanned(first.text)
    url = next_link(first.text)
    assert url is not None
    second = web.get(url)
    assert sorted(hits(first.text) + hits(second.text)) == ["dead-1", "done-1"]
    assert next_link(second.text) is None
    missing = web.get("/search", params={"where": "archive", "queue": "nope-" + queue})
    assert missing.status_code == 400 and "the floor holds no queue" in missing.text
    assert web.get("/search", params={**base, "cursor": "x"}).status_code == 400


def sql_client(conn: Connection, floor: Floor, **options: object) -> tuple[TestClient, str]:
    web = TestClient(create_app(conn, floor=floor, token=TOKEN, **options),  # type: ignore[arg-type]
                     headers=BEARER)
    page = web.get("/search")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    return web, found.group(1) if found else ""


def test_the_sql_box_answers_and_refuses_to_reach_the_host(
        rconn: Connection, queue: str, floor: Floor, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    declare(rconn, queue)
    fill(rconn, queue, pending=0, record=True)
    Driver(rconn, floor, claim_custody=True).fold(queue)
    web, csrf = sql_client(rconn, floor)
    assert 'id="sql-form"' in web.get("/search").text

    def run(sql: str) -> tuple[int, str]:
        answer = web.post("/search/sql", data={"sql": sql, "csrf": csrf})
        return answer.status_code, answer.text

    code, page = run(f"SELECT job_id, outcome FROM outcomes WHERE queue = '{queue}' "
                     "ORDER BY job_id")
    assert code == 200 and re.findall(r'<pre class="cell">([^<]*)</pre>', page) == \
        ["dead-1", "dead", "done-1", "completed"]
    target = tmp_path / "out.csv"
    for sql in ("SELECT * FROM read_csv('/etc/passwd')",
                f"COPY (SELECT 1) TO '{target}'",
                f"ATTACH '{tmp_path / 'other.db'}' AS other",
                "INSTALL httpfs", "LOAD httpfs",
                "SET enable_external_access = true"):
        code, page = run(sql)
        assert code == 400 and 'id="sql-error"' in page, sql
        assert "root:" not in page and ("disabled" in page or "Cannot change" in page), sql
    assert not target.exists() and not (tmp_path / "other.db").exists()
    code, page = run("SELECT * FROM range(1500)")
    assert code == 200 and page.count("<tr><td>") == sql_box.MAX_ROWS
    assert 'id="sql-cut"' in page
    monkeypatch.setattr(sql_box, "TIMEOUT_S", 0.3)
    code, page = run("SELECT count(*) FROM range(100000000000) a")
    assert code == 400 and "ran past 0.3 s and was stopped" in page
    code, page = run("SELECT '<script>alert(9)</script>' AS \"<b>c</b>\"")
    assert code == 200 and "<script>alert(9)" not in page and "<b>c</b>" not in page
    assert "&lt;script&gt;alert(9)&lt;/script&gt;" in page
    assert web.post("/search/sql", data={"sql": "SELECT 1"}).status_code == 403
    assert web.post("/search/sql", data={"sql": "SELECT 1", "csrf": "forged"}
                    ).status_code == 403


def test_the_sql_box_is_never_open_read_only_or_without_a_token(
        rconn: Connection, floor: Floor) -> None:
    web, csrf = sql_client(rconn, floor, read_only=True)
    assert 'id="sql-form"' not in web.get("/search").text
    assert web.post("/search/sql", data={"sql": "SELECT 1", "csrf": csrf}).status_code == 403
    open_web = TestClient(create_app(rconn, floor=floor))
    page = open_web.get("/search").text
    assert 'id="sql-form"' not in page
    csrf = re.search(r'X-CSRF-Token": "([^"]+)"', page)
    assert csrf is not None
    refused = open_web.post("/search/sql", data={"sql": "SELECT 1", "csrf": csrf.group(1)})
    assert refused.status_code == 403 and "needs a floor" in refused.text
