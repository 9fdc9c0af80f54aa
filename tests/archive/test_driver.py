"""The fold driver end to end: a real Valkey stream, a real floor, real S3 servers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from echomq.archive import (
    Driver,
    Floor,
    LeaseLost,
    NotDeclared,
    Outcome,
    RemoteConflict,
    S3Remote,
    StreamGap,
    StreamRewound,
    declare,
    fold_declared,
    restore,
    undeclare,
    verify,
)
from echomq.archive.fold_lease import FoldLease
from echomq.errors import LeaseHeld, RemoteUnavailable
from echomq.queue.connection import Connection, connect
from echomq.queue.keys import Keys
from echomq.servers.process import free_port
from echomq.servers.seaweed import SeaweedS3
from tests.support.archive import bucket_name, floor_ids, folded_ids, remote_on
from tests.support.proxies import FlakyProxy
from tests.support.recorder import Recorder


def test_fold_end_to_end_then_restore(rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    rec.add(100)
    bad = rec.malformed()
    rec.add(20)
    driver = Driver(rec.conn, tmp_path / "floor", remote, slice_count=25)
    report = driver.fold(rec.queue)
    assert (report.entries, report.quarantined, report.slices, report.uploaded,
            report.trimmed) == (121, 1, 5, 5, 121)
    assert rec.conn.redis.xlen(rec.key) == 0
    floor = driver.floor
    assert floor_ids(floor, rec.queue) == rec.written_ids()
    assert [q.stream_id for q in floor.quarantined(rec.queue)] == [bad]
    assert folded_ids(remote, rec.queue) == rec.written_ids()
    checked = verify(remote, progress=False)[rec.queue]
    assert (checked.slices, checked.entries) == (5, 121)
    manifest = remote.read_manifest(rec.queue)
    assert manifest is not None and (manifest.head, manifest.slices, manifest.entries) == (
        rec.written_ids()[-1], 5, 121)

    restored = restore(remote, tmp_path / "restored", progress=False)[rec.queue]
    assert (restored.slices, restored.entries, restored.quarantined) == (5, 120, 1)
    with Floor(tmp_path / "restored") as copy:
        assert copy.digest(rec.queue) == floor.digest(rec.queue)
        for outcome in Outcome:
            assert copy.audit(rec.queue, outcome) == floor.audit(rec.queue, outcome)
        assert copy.quarantined(rec.queue) == floor.quarantined(rec.queue)
        assert copy.history(rec.queue, "job-7") == floor.history(rec.queue, "job-7")

    again = driver.fold(rec.queue)
    assert (again.entries, again.slices, again.uploaded, again.trimmed) == (0, 0, 0, 0)
    rec.add(7)
    more = driver.fold(rec.queue)
    assert (more.entries, more.slices, more.uploaded) == (7, 1, 1)
    assert folded_ids(remote, rec.queue) == rec.written_ids()
    driver.close()


def test_floor_only_then_a_remote_uploads_the_backlog(rec: Recorder, weed_remote: S3Remote,
                                                      floor_path: Path) -> None:
    rec.add(60)
    with Floor(floor_path) as floor:
        report = Driver(rec.conn, floor, slice_count=20, claim_custody=True).fold(rec.queue)
        assert (report.slices, report.uploaded, report.trimmed) == (3, 0, 60)
        assert floor.status(rec.queue).pending == 3  # recorded, never uploaded
        late = Driver(rec.conn, floor, weed_remote, slice_count=20).fold(rec.queue)
        assert (late.uploaded, late.entries) == (3, 0)
        assert floor.status(rec.queue).pending == 0
    assert folded_ids(weed_remote, rec.queue) == rec.written_ids()


def test_an_undeclared_stream_is_never_trimmed(rconn: Connection, queue: str,
                                               floor_path: Path) -> None:
    rec = Recorder(rconn, queue)
    rec.add(10)
    with pytest.raises(NotDeclared, match="not declared"):
        Driver(rconn, floor_path).fold(queue)
    assert rconn.redis.xlen(rec.key) == 10
    # undeclared between the floor commit and the trim: the fenced trim refuses
    declare(rconn, queue)
    driver = Driver(rconn, floor_path, claim_custody=True,
                    hook=lambda p: p == "before_trim" and undeclare(rconn, queue))
    with pytest.raises(NotDeclared):
        driver.fold(queue)
    assert rconn.redis.xlen(rec.key) == 10
    assert driver.floor.status(queue).entries == 10
    driver.close()


def test_a_second_driver_gets_lease_held(rec: Recorder, server_url: str,
                                         tmp_path: Path) -> None:
    rec.add(30)
    other = connect(server_url)
    second = Driver(other, tmp_path / "other", slice_count=10)
    seen: list[str] = []

    def hook(point: str) -> None:
        if point == "after_floor_commit" and not seen:
            with pytest.raises(LeaseHeld):
                second.fold(rec.queue)
            seen.append("refused")

    first = Driver(rec.conn, tmp_path / "floor", slice_count=10, hook=hook)
    assert first.fold(rec.queue).entries == 30
    assert seen == ["refused"]
    assert rec.conn.redis.get(Keys(rec.queue).archive_lease) is None  # released
    first.close()
    second.close()
    other.close()


def test_a_lapsed_lease_is_waited_for(rec: Recorder, floor_path: Path) -> None:
    rec.add(5)
    FoldLease(rec.conn, rec.queue, lease_ms=300).acquire()  # a crashed driver's lease
    with pytest.raises(LeaseHeld):
        Driver(rec.conn, floor_path).fold(rec.queue)
    report = Driver(rec.conn, floor_path, wait_ms=3000).fold(rec.queue)
    assert report.entries == 5


def test_a_lost_lease_stops_before_the_trim(rec: Recorder, floor_path: Path) -> None:
    rec.add(20)
    lease_key = Keys(rec.queue).archive_lease

    def steal(point: str) -> None:
        if point == "before_trim":
            rec.conn.redis.set(lease_key, "someone-else", px=60_000)

    with pytest.raises(LeaseLost):
        Driver(rec.conn, floor_path, slice_count=10, hook=steal, claim_custody=True).fold(rec.queue)
    assert rec.conn.redis.xlen(rec.key) == 20
    rec.conn.redis.delete(lease_key)
    report = Driver(rec.conn, floor_path, slice_count=10, claim_custody=True).fold(rec.queue)
    assert report.trimmed == 20 and report.entries == 10  # the first slice was already in


def test_slices_are_bounded_by_bytes(rec: Recorder, weed_remote: S3Remote,
                                     floor_path: Path) -> None:
    rec.add(40)
    report = Driver(rec.conn, floor_path, weed_remote, slice_bytes=1500).fold(rec.queue)
    assert report.slices >= 4
    refs = weed_remote.list_slices(rec.queue)
    assert len(refs) == report.slices
    assert folded_ids(weed_remote, rec.queue) == rec.written_ids()


def test_the_floor_grows_its_map_mid_fold(rec: Recorder, tmp_path: Path) -> None:
    rec.add(3000)
    with Floor(tmp_path / "tiny", map_size=64 * 1024) as floor:
        report = Driver(rec.conn, floor, slice_count=500).fold(rec.queue)
        assert report.entries == 3000 and floor.grows >= 1
        assert floor_ids(floor, rec.queue) == rec.written_ids()


def test_fold_declared_folds_every_declared_queue(rconn: Connection, floor_path: Path) -> None:
    recs = []
    for _ in range(2):
        queue = f"t-{bucket_name()[2:14]}"
        declare(rconn, queue)
        recs.append(Recorder(rconn, queue))
        recs[-1].add(4)
    stray = Recorder(rconn, f"t-{bucket_name()[2:14]}")
    stray.add(3)
    reports = fold_declared(rconn, floor_path)
    for rec in recs:
        assert reports[rec.queue].entries == 4 and reports[rec.queue].error is None
    assert stray.queue not in reports and rconn.redis.xlen(stray.key) == 3


def test_a_store_that_is_down_keeps_the_stream(rec: Recorder, weed_remote: S3Remote,
                                               seaweed: SeaweedS3, floor_path: Path) -> None:
    rec.add(30)
    dead = S3Remote(weed_remote.bucket, "archive/", f"http://127.0.0.1:{free_port()}",
                    "us-east-1", seaweed.access_key, seaweed.secret_key, retries=1,
                    backoff_s=0.01, timeout_s=1)
    with Floor(floor_path) as floor:
        with pytest.raises(RemoteUnavailable) as info:
            Driver(rec.conn, floor, dead, slice_count=10).fold(rec.queue)
        assert info.value.report.trimmed == 0  # type: ignore[attr-defined]
        assert rec.conn.redis.xlen(rec.key) == 30
        assert floor.status(rec.queue).entries == 0  # the manifest read failed first
        # up for the read, down for the upload: the commit stands, nothing is trimmed
        proxy = FlakyProxy(seaweed.endpoint_url)
        flaky = S3Remote(weed_remote.bucket, "archive/", proxy.endpoint_url, "us-east-1",
                         seaweed.access_key, seaweed.secret_key, retries=2, backoff_s=0.01)
        hook = lambda p: p == "during_upload" and setattr(proxy, "down", True)  # noqa: E731
        with pytest.raises(RemoteUnavailable):
            Driver(rec.conn, floor, flaky, slice_count=10, hook=hook).fold(rec.queue)
        status = floor.status(rec.queue)
        assert (status.entries, status.pending) == (10, 1)
        assert rec.conn.redis.xlen(rec.key) == 30
        proxy.down = False
        report = Driver(rec.conn, floor, flaky, slice_count=10).fold(rec.queue)
        proxy.close()
        assert (report.uploaded, report.trimmed) == (3, 30)
    assert folded_ids(weed_remote, rec.queue) == rec.written_ids()


def test_503s_are_retried(rec: Recorder, weed_remote: S3Remote, seaweed: SeaweedS3,
                          floor_path: Path) -> None:
    rec.add(25)
    proxy = FlakyProxy(seaweed.endpoint_url, fail=3)
    flaky = S3Remote(weed_remote.bucket, "archive/", proxy.endpoint_url, "us-east-1",
                     seaweed.access_key, seaweed.secret_key, retries=4, backoff_s=0.01)
    report = Driver(rec.conn, floor_path, flaky, slice_count=10).fold(rec.queue)
    proxy.close()
    assert proxy.refused == 3 and report.trimmed == 25
    assert folded_ids(weed_remote, rec.queue) == rec.written_ids()


def test_seaweedfs_stopped_mid_fold(rec: Recorder, tmp_path: Path) -> None:
    rec.add(40)
    with SeaweedS3(tmp_path / "weed") as server:
        remote = remote_on(server, "stops", retries=1, backoff_s=0.01, timeout_s=2)
        uploads: list[str] = []

        def hook(point: str) -> None:
            if point == "during_upload":
                uploads.append(point)
                if len(uploads) == 2:
                    server.stop()

        with pytest.raises(RemoteUnavailable):
            Driver(rec.conn, tmp_path / "floor", remote, slice_count=10, hook=hook).fold(
                rec.queue)
        remaining = rec.stream_ids()
        assert remaining == rec.written_ids()[10:]  # only the uploaded slice was trimmed
        server.start()  # same folder, same ports: the data is still there
        report = Driver(rec.conn, tmp_path / "floor", remote, slice_count=10).fold(rec.queue)
        assert report.uploaded == 3 and rec.conn.redis.xlen(rec.key) == 0
        assert folded_ids(remote, rec.queue) == rec.written_ids()


def test_two_drivers_in_threads_never_duplicate_or_skip(rec: Recorder, server_url: str,
                                                        weed_remote: S3Remote,
                                                        floor_path: Path) -> None:
    floor = Floor(floor_path)
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        conn = connect(server_url)
        driver = Driver(conn, floor, weed_remote, slice_count=7, wait_ms=10_000)
        try:
            while not stop.is_set():
                driver.fold(rec.queue)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for _ in range(15):
        rec.add(9)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors
    Driver(rec.conn, floor, weed_remote, slice_count=7, wait_ms=5000).fold(rec.queue)
    assert floor_ids(floor, rec.queue) == rec.written_ids()
    assert folded_ids(weed_remote, rec.queue) == rec.written_ids()
    assert rec.conn.redis.xlen(rec.key) == 0
    floor.close()


def test_a_second_machine_catches_up_from_the_remote(rec: Recorder, weed_remote: S3Remote,
                                                     tmp_path: Path) -> None:
    rec.add(30)
    first = Driver(rec.conn, tmp_path / "a", weed_remote, slice_count=10)
    first.fold(rec.queue)
    rec.add(5)
    second = Driver(rec.conn, tmp_path / "b", weed_remote, slice_count=10)
    report = second.fold(rec.queue)
    assert (report.pulled, report.entries, report.uploaded) == (3, 5, 1)
    assert floor_ids(second.floor, rec.queue) == rec.written_ids()
    manifest = weed_remote.read_manifest(rec.queue)
    assert manifest is not None and manifest.entries == 35 and manifest.slices == 4
    first.fold(rec.queue)  # and back: the first machine pulls the slice it missed
    assert first.floor.digest(rec.queue) == second.floor.digest(rec.queue)
    first.close()
    second.close()


def test_a_fresh_driver_never_hides_history(rec: Recorder, weed_remote: S3Remote,
                                            tmp_path: Path) -> None:
    rec.add(20)
    Driver(rec.conn, tmp_path / "a", weed_remote, slice_count=10).fold(rec.queue)
    weed_remote.client.delete_object(Bucket=weed_remote.bucket,
                                     Key=f"archive/{rec.queue}/manifest.json")
    rec.add(5)
    fresh = Driver(rec.conn, tmp_path / "fresh", weed_remote, slice_count=10)
    with pytest.raises(StreamGap):  # the fresh floor lacks the 20 trimmed entries
        fresh.fold(rec.queue)
    assert len(fresh.acknowledge_gap(rec.queue, by="test")) == 1
    with pytest.raises(RemoteConflict, match="no manifest"):
        fresh.fold(rec.queue)
    fresh.close()
    assert rec.conn.redis.xlen(rec.key) == 5
    assert weed_remote.read_manifest(rec.queue) is None
    assert len(weed_remote.list_slices(rec.queue)) == 2


def test_a_rewound_stream_is_not_trimmed(rec: Recorder, floor_path: Path) -> None:
    rec.add(10)
    driver = Driver(rec.conn, floor_path)
    driver.fold(rec.queue)
    rec.conn.redis.delete(rec.key)  # recreated (or rolled back by a failover)
    rec.conn.redis.xadd(rec.key, {"job": "late", "outcome": "dead", "result": "x",
                                  "attempts": "1", "at": "5"}, id="1-1")
    with pytest.raises(StreamRewound, match="before the floor's checkpoint"):
        driver.fold(rec.queue)
    assert rec.conn.redis.xlen(rec.key) == 1
    driver.close()


def test_the_parsed_read_path_folds_the_same(rec: Recorder, tmp_path: Path) -> None:
    rec.add(30)
    rec.malformed()
    driver = Driver(rec.conn, tmp_path / "parsed", slice_count=8)
    driver._raw = None  # what a cluster client gets: redis-py's parsed XRANGE
    assert driver.fold(rec.queue).entries == 31
    assert floor_ids(driver.floor, rec.queue) == rec.written_ids()
    driver.close()
