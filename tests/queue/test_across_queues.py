"""What spans queues finds them all, on one server and on a Cluster (where the names
are drawn to land on every primary, so a SCAN of one node or with one cursor for all
would miss some): ``echomq.queues``, ``emq queues``, ``emq status`` over every queue,
the Prometheus scrape, the dashboard's discovery, and obliterate."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import echomq
from echomq.cli import main
from echomq.prometheus import render
from echomq.queue.connection import Connection
from echomq.queue.declared import declare
from echomq.queue.scan import KeyspaceScan
from echomq.web.discovery import QueueDirectory
from tests.prometheus.scrape import parse, queues_of, value
from tests.support.spread import primary_of, spread_queues


def filled(conn: Connection, count: int = 6) -> list[str]:
    """``count`` queues (spread over the primaries), each holding one pending job."""
    names = spread_queues(conn, count)
    for name in names:
        echomq.add(conn, name, {"on": primary_of(conn, name)})
    return names


def test_queues_lists_every_queue_on_every_primary(rconn: Connection) -> None:
    added = filled(rconn)
    declared, retained, scheduled = spread_queues(rconn, 3)  # no job: only in their sets
    declare(rconn, declared)
    echomq.set_retention(rconn, retained, completed_count=5)
    echomq.schedule(rconn, scheduled, "nightly", "0 3 * * *", {"n": 1})
    found = echomq.queues(rconn)
    assert set(added) | {declared, retained, scheduled} <= set(found)
    assert found == sorted(found)


def test_a_resumed_scan_walks_each_primary_once_with_its_own_cursor(
        rconn: Connection) -> None:
    added = filled(rconn, 9)
    pattern = rconn.prefix + ":{spread-*}:seq"
    scan = KeyspaceScan(rconn.redis, pattern, count=2)  # many small steps per node
    seen: list[str] = []
    done = False
    while not done:
        keys, done = scan.step()
        seen.extend(keys)
    assert {rconn.keys(q).seq for q in added} <= set(seen)
    # the next step starts a new pass
    again = scan.full_pass()
    assert {rconn.keys(q).seq for q in added} <= set(again)


def test_emq_queues_and_emq_status_cover_every_queue(server_url: str,
                                                     rconn: Connection) -> None:
    added = filled(rconn)
    runner = CliRunner()
    listed = runner.invoke(main, ["--url", server_url, "queues", "--json"])
    assert listed.exit_code == 0, listed.output
    assert set(added) <= set(json.loads(listed.output)["queues"])
    shown = runner.invoke(main, ["--url", server_url, "status", "--json"])
    assert shown.exit_code == 0, shown.output
    every = json.loads(shown.output)["queues"]
    for name in added:
        assert every[name]["pending"] == 1
    text = runner.invoke(main, ["--url", server_url, "status"])
    assert text.exit_code == 0, text.output
    for name in added:
        assert f"{name}: pending=1 " in text.output


def test_a_scrape_reports_every_queue(rconn: Connection) -> None:
    added = filled(rconn)
    fresh = echomq.connect(rconn.url)  # a finder of its own, which has not rested yet
    try:
        body, _ = render(fresh)
    finally:
        fresh.close()
    assert set(added) <= queues_of(parse(body))


def test_the_dashboard_discovers_every_queue(rconn: Connection) -> None:
    added = filled(rconn)
    directory = QueueDirectory(rconn, ttl_s=0.0, budget=1, step=50)  # one small step a refresh
    for _ in range(10_000):
        if set(added) <= set(directory.names()):
            break
    assert set(added) <= set(directory.names())


def test_obliterate_removes_queues_on_every_primary_and_keeps_the_others(
        conn: Connection) -> None:
    gone = filled(conn)
    kept = filled(conn, 3)
    for name in gone:
        declare(conn, name)
        assert echomq.obliterate(conn, name) > 0
    found = set(echomq.queues(conn))
    assert not set(gone) & found
    assert set(kept) <= found
    for name in gone:
        assert echomq.counts(conn, name).pending == 0
        assert not list(KeyspaceScan(conn.redis, conn.keys(name).pattern,
                                     count=1000).full_pass())
    for name in kept:
        assert echomq.counts(conn, name).pending == 1


def test_foreign_keys_under_the_prefix_are_skipped_everywhere(
        server_url: str, rconn: Connection, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 20, item 9: a key under the prefix that is not UTF-8 (another writer's) broke
    every reply that held it in a decoding client: ``queues()``, ``emq status``, the
    scrape and the dashboard's overview. It is skipped (and counted); so is a UTF-8 key
    whose name the key builder refuses."""
    from starlette.testclient import TestClient

    from echomq.web import create_app

    added = filled(rconn)
    head = rconn.prefix.encode()
    foreign: list[bytes] = [head + b":{\xff\xfe}:seq", head + b":{caf\xe9}:pending",
                            head + b":{a b}:seq", head + b":{a b}:pending"]
    for key in foreign:
        if key.endswith(b":seq"):
            rconn.redis.set(key, 1)
        else:
            rconn.redis.zadd(key, {"x": 1})
    try:
        with caplog.at_level("WARNING", logger="echomq.queues"):
            found = echomq.queues(rconn)
        assert set(added) <= set(found) and "a b" not in found
        assert "skipped 2 key(s)" in caplog.text
        shown = CliRunner().invoke(main, ["--url", server_url, "status", "--json"])
        assert shown.exit_code == 0, shown.output
        assert set(added) <= set(json.loads(shown.stdout)["queues"])
        fresh = echomq.connect(rconn.url)  # a finder of its own
        try:
            body, _ = render(fresh)
        finally:
            fresh.close()
        metrics = parse(body)
        assert set(added) <= queues_of(metrics)
        assert value(metrics, "echomq_foreign_keys") == 1  # not UTF-8; "a b" is refused
        directory = QueueDirectory(rconn, ttl_s=0.0, budget=1, step=50)
        for _ in range(10_000):
            if set(added) <= set(directory.names()) and directory.skipped:
                break
        assert set(added) <= set(directory.names()) and "a b" not in directory.names()
        assert directory.skipped == 2  # the zsets: one not UTF-8, one a refused name
        page = TestClient(create_app(rconn)).get("/", params={"q": "spread-"})
        assert page.status_code == 200
        assert "2 key(s) under the prefix name no queue" in page.text
    finally:
        rconn.redis.delete(*foreign)
