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

from echomq.archive import Driver, Floor, S3Remote, restore
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
    with Driver(rec.conn, tmp_path / "floor", claim_record=True) as driver:
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
    with Driver(rec.conn, tmp_path / "floor", slice_count=4, claim_record=True) as driver:
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
    with Driver(rec.conn, tmp_path / "floor", claim_record=True) as driver:
        report = driver.fold(rec.queue)
        assert (report.entries, report.quarantined) == (3, 1)
        kept, = driver.floor.quarantined(rec.queue)
    assert kept.stream_id == sid and "more than once" in kept.reason
    assert dict(kept.fields) == {"job": "twice", "outcome": "completed", "result": "first",
                                 "result\x00#2": "second", "attempts": "1",
                                 "at": "1700000000700"}
    assert rec.conn.redis.xlen(rec.key) == 0
