"""Entries the floor cannot index as they are get quarantined, exactly; the fold goes on.

Anything can write to the outcome stream (another client's XADD, a payload stored as raw
bytes, a job id from before names were limited in bytes). Before, one byte that is not
UTF-8 made every fold fail with a UnicodeDecodeError, and a job id too long for an LMDB key
made every fold fail with MDB_BAD_VALSIZE: either way the stream was never trimmed again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import echomq
from echomq.archive import Driver, Floor, S3Remote, declare, restore
from echomq.cli.app import main
from tests.support.archive import floor_ids
from tests.support.recorder import Recorder

BAD = {
    "result": {"job": "bad-result", "outcome": "completed", "result": b"\xff\xfe{raw",
               "attempts": "1", "at": "1700000000500"},
    "job": {"job": b"job-\xc3", "outcome": "dead", "result": "x", "attempts": "2",
            "at": "1700000000501"},
    "name": {"job": "bad-name", b"\x80field": "v", "outcome": "cancelled", "result": "r",
             "attempts": "1", "at": "1700000000502"},
}


def _as_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def test_bytes_that_are_not_utf8_are_quarantined_exactly_and_the_stream_is_trimmed(
        rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    rec.add(10)
    bad_ids = [str(rec.conn.redis.xadd(rec.key, fields)) for fields in BAD.values()]
    rec.add(10)

    with Driver(rec.conn, tmp_path / "floor", remote, slice_count=7) as driver:
        report = driver.fold(rec.queue)
        assert (report.entries, report.quarantined, report.error) == (23, 3, None)
        assert rec.conn.redis.xlen(rec.key) == 0
        floor = driver.floor
        kept = floor.quarantined(rec.queue)
        assert [q.stream_id for q in kept] == bad_ids
        assert all("UTF-8" in q.reason for q in kept)
        as_bytes = [{_as_bytes(k): _as_bytes(v) for k, v in q.fields} for q in kept]
        assert as_bytes == [{k if isinstance(k, bytes) else k.encode():
                             v if isinstance(v, bytes) else v.encode()
                             for k, v in fields.items()} for fields in BAD.values()]
        assert len(floor.entries(rec.queue)) == 20
        assert len(floor_ids(floor, rec.queue)) == 23

        shown = kept[0].to_dict()
        assert shown["fields"]["result"] == "\\xff\\xfe{raw"
        out = tmp_path / "audit.jsonl"
        with out.open("w", encoding="utf-8") as handle:
            assert floor.export_jsonl(rec.queue, handle, quarantine=True) == 23
        assert len(out.read_text(encoding="utf-8").splitlines()) == 23

        restored = restore(remote, tmp_path / "restored", progress=False)[rec.queue]
        assert (restored.entries, restored.quarantined) == (20, 3)
        with Floor(tmp_path / "restored") as copy:
            assert copy.digest(rec.queue) == floor.digest(rec.queue)
            assert copy.quarantined(rec.queue) == kept

    result = CliRunner().invoke(main, ["archive", "audit", rec.queue, "--quarantine",
                                       "--json", "--floor", str(tmp_path / "floor")])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [r["fields"]["result"] for r in rows if r.get("reason")][0] == "\\xff\\xfe{raw"


def test_a_floor_only_fold_quarantines_them_too(rec: Recorder, tmp_path: Path) -> None:
    rec.add(5)
    bad = str(rec.conn.redis.xadd(rec.key, BAD["result"]))
    with Driver(rec.conn, tmp_path / "floor", claim_custody=True) as driver:
        report = driver.fold(rec.queue)
        assert (report.entries, report.quarantined) == (6, 1)
        assert [q.stream_id for q in driver.floor.quarantined(rec.queue)] == [bad]
    assert rec.conn.redis.xlen(rec.key) == 0


def test_a_scrape_and_the_dashboard_read_past_such_an_entry(rec: Recorder,
                                                            tmp_path: Path) -> None:
    from echomq.prometheus import render
    from echomq.web.archive_view import archive_rows
    from tests.prometheus.scrape import parse, value

    rec.conn.redis.xadd(rec.key, BAD["name"])
    rec.add(2)
    samples = parse(render(rec.conn)[0])
    assert value(samples, "echomq_archive_lag_entries", queue=rec.queue) == 3
    assert value(samples, "echomq_archive_lag_seconds", queue=rec.queue) is not None
    with Floor(tmp_path / "floor") as floor:
        row, = [r for r in archive_rows(rec.conn, floor, 1_800_000_000_000)
                if r.queue == rec.queue]
        assert (row.stream_length, row.lag_entries) == (3, 3)


def test_text_that_only_looks_like_an_escape_is_archived_as_usual(rec: Recorder,
                                                                   tmp_path: Path) -> None:
    fields = {"job": "win-path", "outcome": "completed", "result": "C:\\udata\\udcff",
              "attempts": "1", "at": "1700000000600"}
    rec.conn.redis.xadd(rec.key, fields)
    with Driver(rec.conn, tmp_path / "floor") as driver:
        assert (driver.fold(rec.queue).quarantined, driver.floor.quarantined(rec.queue)) == (
            0, [])
        entry, = driver.floor.history(rec.queue, "win-path")
        assert entry.result == "C:\\udata\\udcff"


def test_a_job_id_too_long_for_a_floor_key_is_quarantined(rec: Recorder, tmp_path: Path
                                                           ) -> None:
    rec.add(3)
    long_id = "🦄" * 200  # 800 bytes: refused by the key builder now, not always before
    bad = str(rec.conn.redis.xadd(rec.key, {**BAD["result"], "job": long_id,
                                            "result": "ok"}))
    rec.add(3)
    with Driver(rec.conn, tmp_path / "floor", slice_count=4, claim_custody=True) as driver:
        report = driver.fold(rec.queue)
        assert (report.entries, report.quarantined, report.error) == (7, 1, None)
        kept, = driver.floor.quarantined(rec.queue)
        assert (kept.stream_id, dict(kept.fields)["job"]) == (bad, long_id)
        assert "bytes in UTF-8" in kept.reason
    assert rec.conn.redis.xlen(rec.key) == 0


@pytest.mark.plain_only  # the server's own byte count: one node
def test_a_slice_of_large_entries_reads_about_what_it_keeps(rec: Recorder,
                                                            tmp_path: Path) -> None:
    big = "x" * 200_000  # a recorded payload of 200 KB
    pipe = rec.conn.redis.pipeline(transaction=False)
    for n in range(120):
        pipe.xadd(rec.key, {"job": f"j{n}", "outcome": "completed", "result": big,
                            "attempts": "1", "at": str(1_700_000_000_000 + n)})
    pipe.execute()
    stream_bytes = 120 * len(big)

    def sent() -> int:
        return int(rec.conn.redis.info("stats")["total_net_output_bytes"])

    before = sent()
    with Driver(rec.conn, tmp_path / "floor", slice_bytes=1_000_000) as driver:
        report = driver.fold(rec.queue)
    assert (report.entries, report.slices) == (120, 30)  # 4 lines of 200 KB fit in 1 MB
    # every slice read all that was left before (about 15 times the stream here)
    assert sent() - before < 2 * stream_bytes


@pytest.mark.plain_only  # redis-py's Cluster client folds each entry into a dict first
def test_a_field_named_twice_is_quarantined_with_both_values(rec: Recorder,
                                                            tmp_path: Path) -> None:
    sid = str(rec.conn.redis.execute_command(
        "XADD", rec.key, "*", "job", "twice", "outcome", "completed", "result", "first",
        "result", "second", "attempts", "1", "at", "1700000000700"))
    rec.add(2)
    with Driver(rec.conn, tmp_path / "floor", claim_custody=True) as driver:
        report = driver.fold(rec.queue)
        assert (report.entries, report.quarantined) == (3, 1)
        kept, = driver.floor.quarantined(rec.queue)
    assert kept.stream_id == sid and "more than once" in kept.reason
    assert dict(kept.fields) == {"job": "twice", "outcome": "completed", "result": "first",
                                 "result\x00#2": "second", "attempts": "1",
                                 "at": "1700000000700"}
    assert rec.conn.redis.xlen(rec.key) == 0


LARGEST = "18446744073709551615-18446744073709551615"
FUTURE = "4102444800000-0"  # 2100-01-01: ahead of any server clock
"""Ids another writer may give its entries: the largest one exhausts the stream (every
later XADD is refused), a far-future one drags every later '*' id to 2100."""


def _settle(conn: echomq.Connection, queue: str, n: int, *, dead: int = 0) -> list[str]:
    """``n`` jobs run through the public verbs, the first ``dead`` of them dead-lettered."""
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(n)], max_attempts=1)
    for i, job in enumerate(echomq.claim(conn, queue, lease_ms=60_000, count=n)):
        if i < dead:
            assert echomq.fail(conn, queue, job.id, job.token, "boom") == "dead"
        else:
            echomq.complete(conn, queue, job.id, job.token, i)
    return ids


def test_an_outside_xadd_of_the_largest_id_never_wedges_a_settle_and_nothing_is_lost(
        conn: echomq.Connection, queue: str, tmp_path: Path) -> None:
    """Both executors: before, every settle after it failed ('The stream has exhausted
    the last possible ID') and its job stayed active."""
    declare(conn, queue)
    keys = conn.keys(queue)
    first = _settle(conn, queue, 3)
    conn.redis.xadd(keys.completions, {"f": "v"}, id=LARGEST)
    later = _settle(conn, queue, 4, dead=1)
    assert echomq.counts(conn, queue) == echomq.Counts(0, 0, 0, 6, 1)
    for job_id in first + later:  # every row names its entry, an id of its settle's time
        job = echomq.get_job(conn, queue, job_id)
        assert job is not None and job.state in ("completed", "dead")
        assert conn.redis.hget(keys.job(job_id), "entry") in [
            sid for sid, _ in conn.redis.xrange(keys.completions)]
    aside = [json.loads(e) for e in conn.redis.lrange(keys.foreign, 0, -1)]
    assert [(e["id"], e["fields"]) for e in aside] == [(LARGEST, ["f", "v"])]

    with Driver(conn, tmp_path / "floor", claim_custody=True) as driver:
        report = driver.fold(queue)
        assert (report.entries, report.quarantined, report.error) == (7, 0, None)
        assert (report.ahead, report.set_aside, report.trimmed) == (0, 1, 7)
        assert {e.job_id for e in driver.floor.entries(queue)} == set(first + later)
        _settle(conn, queue, 2)  # the stream takes entries as ever
        assert driver.fold(queue).entries == 2


def test_the_fold_reports_foreign_entries_and_never_folds_an_id_from_the_future(
        rec: Recorder, tmp_path: Path) -> None:
    conn, keys = rec.conn, rec.conn.keys(rec.queue)
    _settle(conn, rec.queue, 2)
    conn.redis.xadd(keys.completions, {"source": "someone else"})  # lacks our fields
    conn.redis.xadd(keys.completions, {"f": "v"}, id=FUTURE)
    with Driver(conn, tmp_path / "floor", claim_custody=True) as driver:
        report = driver.fold(rec.queue)
        assert (report.entries, report.quarantined, report.foreign) == (3, 1, 1)
        assert (report.ahead, report.set_aside) == (1, 0)
        checkpoint = report.checkpoint
        assert checkpoint != FUTURE and conn.redis.xlen(keys.completions) == 1
        _settle(conn, rec.queue, 2)  # sets the future entry aside, records at its time
        report = driver.fold(rec.queue)
        assert (report.entries, report.foreign, report.ahead, report.set_aside) == (2, 0, 0, 1)
        assert not report.checkpoint.startswith("4102444800000")
        assert conn.redis.xlen(keys.completions) == 0
