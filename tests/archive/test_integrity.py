"""The archive never trims what it cannot prove it kept (issue 8, items 13 and 14).

Item 13: entries that leave the stream before the floor took them (an outside XTRIM or
XDEL) stop the fold with StreamGap, recorded in the floor and shown by status, audit and
verify, until an operator acknowledges the loss.
Item 14: only a driver that writes the stream's archive of record trims it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import lmdb
import pytest
from click.testing import CliRunner

import echomq
from echomq.archive import (
    Driver,
    Floor,
    S3Remote,
    StreamGap,
    archive_of_record,
    declare,
    fold_declared,
    record_address,
    restore,
)
from echomq.archive.stream_ids import id_key
from echomq.cli.archive import archive_cli
from echomq.errors import FloorError, StreamUnavailable
from echomq.queue.connection import Connection
from echomq.servers.seaweed import SeaweedS3
from echomq.servers.valkey import EmbeddedValkey
from tests.support.archive import floor_ids, folded_ids, remote_on
from tests.support.recorder import Recorder


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(archive_cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


# -- item 13: gaps --------------------------------------------------------------------------


def test_an_outside_trim_of_unfolded_entries_stops_the_fold(rec: Recorder,
                                                             floor_path: Path) -> None:
    first = rec.add(10)
    driver = Driver(rec.conn, floor_path, slice_count=4, claim_custody=True)
    assert driver.fold(rec.queue).trimmed == 10
    later = rec.add(20)
    rec.conn.redis.execute_command("XTRIM", rec.key, "MINID", "=", later[5])  # 5 lost
    with pytest.raises(StreamGap) as info:
        driver.fold(rec.queue)
    gap = info.value
    assert (gap.count, gap.after) == (5, first[-1])
    assert id_key(later[4]) <= id_key(gap.upto) < id_key(later[5])
    assert info.value.report.trimmed == 0  # type: ignore[attr-defined]
    assert rec.conn.redis.xlen(rec.key) == 15  # nothing trimmed
    floor = driver.floor
    assert floor.status(rec.queue).entries == 10  # nothing folded past the gap
    assert (floor.status(rec.queue).gaps, floor.status(rec.queue).gaps_acknowledged) == (1, 0)
    assert floor.audit(rec.queue).gaps == (floor.gaps(rec.queue)[0],)
    with pytest.raises(StreamGap):  # it stays stopped until someone decides
        driver.fold(rec.queue)
    assert len(floor.gaps(rec.queue)) == 1

    acked = driver.acknowledge_gap(rec.queue, by="ops", note="XTRIM by a script")
    assert [(g.count, g.acknowledged_by, g.note) for g in acked] == [(5, "ops",
                                                                      "XTRIM by a script")]
    report = driver.fold(rec.queue)
    assert (report.entries, report.trimmed) == (15, 15)
    assert floor_ids(floor, rec.queue) == first + later[5:]
    assert (floor.status(rec.queue).gaps, floor.status(rec.queue).gaps_acknowledged) == (0, 1)
    rec.add(3)  # and folds go on without finding the acknowledged loss again
    assert driver.fold(rec.queue).entries == 3
    assert driver.acknowledge_gap(rec.queue) == []
    driver.close()


def test_a_deleted_entry_after_the_checkpoint_is_a_gap(rec: Recorder,
                                                       floor_path: Path) -> None:
    rec.add(5)
    driver = Driver(rec.conn, floor_path, claim_custody=True)
    driver.fold(rec.queue)
    later = rec.add(10)
    rec.conn.redis.xdel(rec.key, later[3], later[6])
    with pytest.raises(StreamGap) as info:
        driver.fold(rec.queue)
    assert (info.value.count, info.value.upto) == (2, later[6])
    assert rec.conn.redis.xlen(rec.key) == 8
    driver.acknowledge_gap(rec.queue, by="test")
    assert driver.fold(rec.queue).entries == 8
    driver.close()


def test_a_trim_during_the_fold_is_caught_before_the_next_slice(rec: Recorder,
                                                                floor_path: Path) -> None:
    ids = rec.add(30)

    def hook(point: str) -> None:
        if point == "after_trim" and rec.conn.redis.xlen(rec.key) == 20:
            rec.conn.redis.execute_command("XTRIM", rec.key, "MINID", "=", ids[15])

    driver = Driver(rec.conn, floor_path, slice_count=10, hook=hook, claim_custody=True)
    with pytest.raises(StreamGap) as info:
        driver.fold(rec.queue)
    assert (info.value.after, info.value.count) == (ids[9], 5)
    assert floor_ids(driver.floor, rec.queue) == ids[:10]
    assert rec.conn.redis.xlen(rec.key) == 15
    driver.close()


def test_outside_trims_of_folded_entries_are_no_gap(rec: Recorder, floor_path: Path
                                                    ) -> None:
    # a reader that never trims: an outside trim of what it already folded loses nothing
    declare(rec.conn, rec.queue, archive="s3://somewhere-else/")
    ids = rec.add(10)
    reader = Driver(rec.conn, floor_path, slice_count=3)
    assert reader.fold(rec.queue).trimmed == 0
    rec.conn.redis.execute_command("XTRIM", rec.key, "MINID", "=", ids[6])
    rec.add(5)
    assert reader.fold(rec.queue).entries == 5
    rec.conn.redis.xdel(rec.key, ids[8])  # deleting a folded entry loses nothing either
    assert reader.fold(rec.queue).entries == 0
    reader.close()


def test_the_drivers_own_trims_are_never_a_gap(rec: Recorder, weed_remote: S3Remote,
                                               tmp_path: Path) -> None:
    """Slice by slice, fold after fold, with uploads held back by a failing store and a
    second floor catching up from the remote: the record's trims never look like a loss."""
    with Floor(tmp_path / "own") as floor:
        driver = Driver(rec.conn, floor, weed_remote, slice_count=4)
        for _ in range(3):
            rec.add(9)
            driver.fold(rec.queue)
        assert floor_ids(floor, rec.queue) == rec.written_ids()
        assert floor.gaps(rec.queue) == []
    rec.add(5)
    late = Driver(rec.conn, tmp_path / "late", weed_remote, slice_count=4)
    assert late.fold(rec.queue).entries == 5  # pulled the 27 first, then read the 5
    assert floor_ids(late.floor, rec.queue) == rec.written_ids()
    late.close()


def test_status_audit_and_verify_show_a_gap_and_ack_gap_accepts_it(
        rec: Recorder, server_url: str, seaweed: SeaweedS3, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = f"gap-{rec.queue[2:]}"
    remote_on(seaweed, bucket)
    for name, value in {"EMQ_S3_BUCKET": bucket, "EMQ_S3_ENDPOINT_URL": seaweed.endpoint_url,
                        "EMQ_S3_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": seaweed.access_key,
                        "AWS_SECRET_ACCESS_KEY": seaweed.secret_key, "EMQ_URL": server_url,
                        "EMQ_FLOOR": str(tmp_path / "floor")}.items():
        monkeypatch.setenv(name, value)
    rec.add(6)
    assert invoke("fold", rec.queue)[0] == 0
    later = rec.add(6)
    rec.conn.redis.execute_command("XTRIM", rec.key, "MINID", "=", later[2])
    code, out, err = invoke("fold", rec.queue, "--json")
    assert code == 1 and "StreamGap" in json.loads(out)["error"]
    assert f"fold failed for 1 of 1 queue(s): {rec.queue}" in err
    code, out, err = invoke("status", rec.queue, "--json")
    assert json.loads(out)["gaps"] == 1 and "GAP: " in err and "NOT acknowledged" in err
    code, out, err = invoke("audit", rec.queue, "--json")
    assert len(out.splitlines()) == 6 and "2 entries lost" in err
    code, out, err = invoke("verify", "--json")
    assert code == 1 and json.loads(out)["gaps"] == 1 and "2 entries lost" in err
    code, out, err = invoke("ack-gap", rec.queue, "--by", "alice", "--note", "known", "--json")
    assert code == 0 and json.loads(out)["acknowledged_by"] == "alice"
    assert invoke("ack-gap", rec.queue)[0] == 1  # nothing open any more
    code, out, _ = invoke("fold", rec.queue, "--json")
    assert code == 0 and json.loads(out)["entries"] == 4
    code, out, err = invoke("verify", "--json")
    assert code == 0 and json.loads(out)["gaps_acknowledged"] == 1
    assert "acknowledged by alice" in err
    with Floor(tmp_path / "floor") as floor:
        assert [g.note for g in floor.gaps(rec.queue)] == ["known"]


# -- item 14: the archive of record ---------------------------------------------------------


def test_a_driver_without_the_remote_never_trims_what_the_remote_lacks(
        rec: Recorder, weed_remote: S3Remote, tmp_path: Path) -> None:
    """The issue's scenario: B (floor + S3) folds; A (another floor, no bucket) folds;
    then B's floor and a restore from S3 must hold all 30."""
    b = Driver(rec.conn, tmp_path / "b", weed_remote, slice_count=4)
    a = Driver(rec.conn, tmp_path / "a", slice_count=4)
    rec.add(10)
    assert b.fold(rec.queue).trimmed == 10  # the first trimming driver claims the record
    assert archive_of_record(rec.conn, rec.queue) == record_address(weed_remote)
    rec.add(10)
    with pytest.raises(StreamGap):  # A's fresh floor missed B's first ten: it says so
        a.fold(rec.queue)
    a.acknowledge_gap(rec.queue, by="test")
    report = a.fold(rec.queue)
    assert (report.entries, report.trimmed) == (10, 0)
    assert report.trim_refused is not None and record_address(weed_remote) in \
        report.trim_refused
    assert rec.conn.redis.xlen(rec.key) == 10
    rec.add(10)
    assert b.fold(rec.queue).entries == 20
    assert floor_ids(b.floor, rec.queue) == rec.written_ids()
    assert folded_ids(weed_remote, rec.queue) == rec.written_ids()
    restored = restore(weed_remote, tmp_path / "restored", progress=False)[rec.queue]
    assert restored.entries == 30
    a.close()
    b.close()


def test_a_declared_record_holds_from_the_first_fold(
        rec: Recorder, weed_remote: S3Remote, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    declare(rec.conn, rec.queue, archive=weed_remote)
    a = Driver(rec.conn, tmp_path / "a", slice_count=4)
    b = Driver(rec.conn, tmp_path / "b", weed_remote, slice_count=4)
    rec.add(10)
    with caplog.at_level("WARNING", logger="echomq.archive.driver"):
        first = a.fold(rec.queue)  # A reads first, and still does not trim
    assert (first.entries, first.trimmed) == (10, 0) and first.trim_refused
    assert "never trims" in caplog.text
    assert b.fold(rec.queue).trimmed == 10
    rec.add(10)
    assert a.fold(rec.queue).entries == 10  # a reader keeps up without gaps
    assert b.fold(rec.queue).trimmed == 10
    assert floor_ids(a.floor, rec.queue) == floor_ids(b.floor, rec.queue) == rec.written_ids()
    assert a.floor.gaps(rec.queue) == []
    a.close()
    b.close()


def test_a_floor_of_record_lets_its_own_driver_trim_even_with_a_remote(
        rec: Recorder, weed_remote: S3Remote, tmp_path: Path) -> None:
    with Floor(tmp_path / "f") as floor:
        echomq.archive.declare(rec.conn, rec.queue, archive=floor)
        assert archive_of_record(rec.conn, rec.queue) == f"floor:{floor.identity()}"
        rec.add(8)
        assert Driver(rec.conn, floor, weed_remote).fold(rec.queue).trimmed == 8
    other = Driver(rec.conn, tmp_path / "other", weed_remote)
    rec.add(3)
    report = other.fold(rec.queue)  # it pulls the eight from the remote, reads three
    assert (report.pulled, report.entries, report.trimmed) == (1, 3, 0)
    assert report.trim_refused and rec.conn.redis.xlen(rec.key) == 3
    other.close()


def test_the_consumer_declare_keeps_the_record(rconn: Connection, queue: str) -> None:
    declare(rconn, queue, archive="s3://kept/")
    declare(rconn, queue)  # what Consumer(record=True) calls
    assert archive_of_record(rconn, queue) == "s3://kept/"
    with pytest.raises(echomq.InvalidArgument):
        declare(rconn, queue, archive="")


def test_the_cli_declares_the_record(rec: Recorder, server_url: str, seaweed: SeaweedS3,
                                     tmp_path: Path) -> None:
    code, _, _ = invoke("declare", rec.queue, "--url", server_url, "--custodian", "remote",
                        "--bucket", "rec-bucket", "--s3-prefix", "p/", "--endpoint-url",
                        seaweed.endpoint_url)
    assert code == 0
    assert archive_of_record(rec.conn, rec.queue) == (
        f"s3://rec-bucket/p/ at {seaweed.endpoint_url}")
    code, out, err = invoke("fold", rec.queue, "--url", server_url, "--floor",
                            str(tmp_path / "fl"), "--json")
    rec.add(2)
    code, out, err = invoke("fold", rec.queue, "--url", server_url, "--floor",
                            str(tmp_path / "fl"), "--json")
    assert code == 0 and json.loads(out)["trim_refused"] and json.loads(out)["trimmed"] == 0
    code, _, _ = invoke("declare", rec.queue, "--url", server_url, "--custodian", "floor",
                        "--floor", str(tmp_path / "fl"))
    with Floor(tmp_path / "fl") as floor:
        assert archive_of_record(rec.conn, rec.queue) == f"floor:{floor.identity()}"
    code, out, _ = invoke("fold", rec.queue, "--url", server_url, "--floor",
                          str(tmp_path / "fl"), "--json")
    assert code == 0 and json.loads(out)["trimmed"] == 2


# --- the Redis server failing mid-fold --------------------------------------------------


def test_a_server_failure_mid_fold_is_an_archive_error_and_the_same_driver_goes_on(
    private_server: EmbeddedValkey, floor_path: Path, queue: str
) -> None:
    conn = echomq.connect(private_server.url)
    declare(conn, queue)
    rec = Recorder(conn, queue)
    rec.add(12)
    crashed = {"n": 0}

    def kill_once(point: str) -> None:
        if point == "after_floor_commit" and not crashed["n"]:
            crashed["n"] += 1
            private_server.kill()

    driver = Driver(conn, floor_path, slice_count=5, hook=kill_once, claim_custody=True)
    with pytest.raises(StreamUnavailable, match=queue) as caught:
        driver.fold(queue)
    assert caught.value.report.entries == 5  # type: ignore[attr-defined]
    private_server.start()  # AOF: the stream and the lapsing fold lease are back
    report = driver.fold(queue)  # its own lease is no obstacle
    assert (report.error, report.entries, report.trimmed) == (None, 7, 12)
    assert rec.stream_ids() == []
    driver.close()
    conn.close()


def test_fold_declared_reports_a_server_failure_per_queue(
    private_server: EmbeddedValkey, floor_path: Path, queue: str
) -> None:
    conn = echomq.connect(private_server.url)
    for name in (queue + "a", queue + "b"):
        declare(conn, name)
        Recorder(conn, name).add(3)

    def kill(point: str) -> None:
        if point == "after_floor_commit":
            private_server.kill()

    reports = fold_declared(conn, floor_path, hook=kill)
    assert sorted(reports) == [queue + "a", queue + "b"]
    assert all("StreamUnavailable" in (r.error or "") for r in reports.values())
    conn.close()


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_floor_removed_or_replaced_while_open_stops_the_trims(
        rec: Recorder, floor_path: Path, tmp_path: Path, how: str) -> None:
    """Someone deletes (or swaps) the floor's folder under a running driver: LMDB writes
    on into a file nobody can open again, and every trim against it loses history."""
    rec.add(10)
    driver = Driver(rec.conn, floor_path, slice_count=5, claim_custody=True)
    try:
        assert driver.fold(rec.queue).trimmed == 10
        rec.add(10)
        if how == "removed":
            shutil.rmtree(floor_path)
        else:
            floor_path.rename(tmp_path / "old-floor")
            lmdb.open(str(floor_path), max_dbs=1).close()  # another floor at the path
        with pytest.raises(FloorError, match="removed or replaced"):
            driver.fold(rec.queue)
        assert rec.conn.redis.xlen(rec.key) == 10  # nothing trimmed against the lost floor
    finally:
        driver.close()
