"""Issue 13, item 4: compaction. Many small slice objects become a few packs; restore and
verify give the same answer before and after, at every step a compaction can be killed
at, and when the object store fails mid-way; tampering with a pack is named by verify."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from echomq.archive import (
    COMPACT_CRASH_POINTS,
    ChainBroken,
    Driver,
    Floor,
    S3Remote,
    compact,
    prune,
    restore,
    verify,
)
from echomq.archive.fold_lease import FoldLease
from echomq.archive.restore_plan import plan
from echomq.cli.archive import archive_cli
from echomq.errors import InvalidArgument, LeaseHeld, RemoteUnavailable
from echomq.queue.connection import connect
from echomq.servers.seaweed import SeaweedS3
from tests.support.aged import DAY_MS, add_aged
from tests.support.archive import bucket_name, floor_ids, folded_ids, remote_on, remote_spec
from tests.support.proxies import FlakyProxy
from tests.support.recorder import Recorder

CHILD = str(Path(__file__).with_name("compact_child.py"))


def fold(rec: Recorder, floor: Path, remote: S3Remote, count: int = 5) -> None:
    driver = Driver(rec.conn, floor, remote, slice_count=count)
    try:
        assert driver.fold(rec.queue).error is None
    finally:
        driver.close()


def restored(remote: S3Remote, path: Path, queue: str, until: str | None = None
             ) -> tuple[list[str], str]:
    """(ids, floor digest) of a fresh restore."""
    restore(remote, path, progress=False, until=until)
    with Floor(path) as floor:
        return floor_ids(floor, queue), floor.digest(queue)


def four_objects(remote: S3Remote, queue: str) -> int:
    """A target that packs about four of these small objects together."""
    return 4 * max(remote.slice_sizes(queue).values())


def test_compaction_merges_small_objects_and_restores_the_same(
        rec: Recorder, remote: S3Remote, floor_path: Path, tmp_path: Path) -> None:
    rec.add(60)
    fold(rec, floor_path, remote)
    assert len(remote.list_slices(rec.queue)) == 12
    before = restored(remote, tmp_path / "before", rec.queue)
    point = rec.written_ids()[27]
    before_pit = restored(remote, tmp_path / "before-pit", rec.queue, until=point)
    pin = verify(remote, progress=False)[rec.queue].head_digest

    report = compact(rec.conn, remote, rec.queue,
                     target_bytes=four_objects(remote, rec.queue))
    assert report.packs >= 2 and report.objects_before == 12
    assert report.objects_after == len(remote.list_slices(rec.queue)) < 12
    assert report.deleted == 12 - (report.objects_after - report.packs)
    the_plan = plan(remote, rec.queue)
    assert the_plan.chain[-1] == remote.list_slices(rec.queue)[-1]  # the newest: untouched
    assert set(the_plan.chain) == set(remote.list_slices(rec.queue)) and not the_plan.orphans

    after = verify(remote, progress=False, floor=floor_path, pins={rec.queue: pin})[rec.queue]
    assert (after.slices, after.entries, after.head_digest) == (12, 60, pin)
    assert restored(remote, tmp_path / "after", rec.queue) == before
    assert restored(remote, tmp_path / "after-pit", rec.queue, until=point) == before_pit
    assert folded_ids(remote, rec.queue) == rec.written_ids()

    # the fold goes on after the packs; a second compaction merges packs and slices
    rec.add(20)
    fold(rec, floor_path, remote)
    again = compact(rec.conn, remote, rec.queue, target_bytes=10_000_000)
    assert (again.packs, again.objects_after) == (1, 2)
    assert len(remote.list_slices(rec.queue)) == 2
    verify(remote, progress=False, floor=floor_path, pins={rec.queue: pin})
    ids, _ = restored(remote, tmp_path / "again", rec.queue)
    assert ids == rec.written_ids()
    assert compact(rec.conn, remote, rec.queue, target_bytes=10_000_000).packs == 0


def test_prune_after_compaction_drops_whole_packs(
        rec: Recorder, remote: S3Remote, floor_path: Path, tmp_path: Path) -> None:
    old = add_aged(rec, 500, 20)
    recent = add_aged(rec, 1, 10)
    fold(rec, floor_path, remote)
    target = 3 * max(remote.slice_sizes(rec.queue).values())
    compact(rec.conn, remote, rec.queue, target_bytes=target)  # packs of 3: (0-15)(15-29)
    report = prune(rec.conn, rec.queue, floor=floor_path, remote=remote, keep=400 * DAY_MS)
    # the second pack holds a recent slice: it stays whole, its old slice with it
    assert (report.entries, report.floor_entries) == (15, 15)
    kept = (old + recent)[15:]
    verify(remote, progress=False, floor=floor_path)
    assert restored(remote, tmp_path / "r", rec.queue)[0] == kept
    with Floor(floor_path) as floor:
        assert floor_ids(floor, rec.queue) == kept


def put_tampered(remote: S3Remote, name: str, edit: Any) -> None:
    """Rewrite an object's entries with ``edit`` (lines -> lines), checksum recomputed."""
    key = remote.prefix + name
    body = gzip.decompress(remote.client.get_object(Bucket=remote.bucket, Key=key)["Body"]
                           .read())
    lines = body.split(b"\n")
    body = b"\n".join([lines[0]] + edit(lines[1:-1]) + [b""])
    data = gzip.compress(body, mtime=0)
    remote.client.put_object(Bucket=remote.bucket, Key=key, Body=data,
                             Metadata={"sha256": hashlib.sha256(data).hexdigest()})


def test_tampering_with_a_pack_is_detected(rec: Recorder, remote: S3Remote,
                                           floor_path: Path, tmp_path: Path) -> None:
    rec.add(30)
    fold(rec, floor_path, remote)
    compact(rec.conn, remote, rec.queue, target_bytes=10_000_000)
    manifest = remote.read_manifest(rec.queue)
    assert manifest is not None and len(manifest.packs) == 1
    pack = plan(remote, rec.queue).chain[0]

    def forge(lines: list[bytes]) -> list[bytes]:
        entry = json.loads(lines[7])
        entry["fields"]["result"] = '{"n": 999}'
        return lines[:7] + [json.dumps(entry, separators=(",", ":")).encode()] + lines[8:]

    put_tampered(remote, pack.name, forge)
    with pytest.raises(ChainBroken, match="pack's digest"):
        verify(remote, progress=False)
    with pytest.raises(ChainBroken):
        restore(remote, tmp_path / "r", progress=False)
    # a forger who also records the forged pack's digest is caught by the slices' digests
    forged = remote.get_slice(pack)
    remote.rewrite_manifest(replace(manifest, packs=(replace(manifest.packs[0],
                                                             digest=forged.meta.digest),)),
                            manifest)
    with pytest.raises(ChainBroken, match="was uploaded: the slice was rewritten"):
        verify(remote, progress=False)
    rec.add(10)
    fold(rec, floor_path, remote)
    with pytest.raises(ChainBroken):  # nor is a forged pack merged into a new one
        compact(rec.conn, remote, rec.queue, target_bytes=10_000_000)


def test_compaction_refuses_while_a_fold_holds_the_lease(rec: Recorder, remote: S3Remote,
                                                       floor_path: Path) -> None:
    rec.add(20)
    fold(rec, floor_path, remote)
    with FoldLease(rec.conn, rec.queue, 10_000), \
            pytest.raises(LeaseHeld):  # a fold (or a prune) is running
        compact(rec.conn, remote, rec.queue)
    assert len(remote.list_slices(rec.queue)) == 4
    with pytest.raises(InvalidArgument):
        compact(rec.conn, remote, rec.queue, target_bytes=0)


LEASE_MS = 3_000
TINY_OBJECTS = 80
PAGE = 10
SLOW: dict[str, tuple[Callable[[str], bool], float, int]] = {
    "reads": (lambda path: "/slices/" in path, 1.0, TINY_OBJECTS - 1),
    "listings": (lambda path: "list-type=" in path, 0.6, 2 * TINY_OBJECTS // PAGE),
}
"""What the store is slow at: (requests, delay of each, how many at least). 80 one-entry
objects read 8 ahead at 1 s each take about 10 s, over three times the 3 s lease, with a
renewal due about every second; listed 10 to a page, twice (the stale objects, the
sizes), at 0.6 s a page, about 10 s too: a bucket of a million tiny objects lists in a
thousand pages. The steps between renewals leave 2 s of the lease to spare: a loaded
machine stalled a run of this test with a 1.5 s lease and 0.5 s reads past it."""


@pytest.mark.slow
@pytest.mark.parametrize(("server_name", "slow"), [("seaweed", "reads"), ("moto", "reads"),
                                                   ("moto", "listings")])
def test_a_long_compaction_renews_its_lease_and_a_fold_waits_for_it(
        server_name: str, slow: str, request: pytest.FixtureRequest, rec: Recorder,
        server_url: str,
        floor_path: Path, tmp_path: Path) -> None:
    server = request.getfixturevalue(server_name)
    remote = remote_on(server, bucket_name(), "archive/", retries=2, backoff_s=0.01)
    rec.add(TINY_OBJECTS)
    fold(rec, floor_path, remote, count=1)
    assert len(remote.list_slices(rec.queue)) == TINY_OBJECTS
    # the compaction reaches the objects through a store that is slow at ``slow``
    proxy = FlakyProxy(server.endpoint_url)
    far = S3Remote(remote.bucket, "archive/", proxy.endpoint_url, "us-east-1",
                   server.access_key, server.secret_key, retries=1, backoff_s=0.01,
                   page_size=PAGE)
    proxy.slow, proxy.delay_s, at_least = SLOW[slow]
    rec.add(7)  # what another driver folds once it gets the lease
    finishing = threading.Event()  # set by the compaction's last step, before its release
    tries: list[str] = []
    folded: list[tuple[int, bool]] = []
    errors: list[BaseException] = []

    def other_driver() -> None:
        """Another driver's fold, tried again and again while the compaction runs."""
        conn = connect(server_url)
        driver = Driver(conn, floor_path, remote, slice_count=10, lease_ms=LEASE_MS)
        try:
            proxy.reading.wait(30)
            while True:
                try:
                    report = driver.fold(rec.queue)
                except LeaseHeld:
                    tries.append("held")
                    time.sleep(0.02)
                    continue
                folded.append((report.uploaded, finishing.is_set()))
                return
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)
        finally:
            driver.close()
            conn.close()

    racer = threading.Thread(target=other_driver)
    racer.start()
    started = time.monotonic()
    try:
        report = compact(rec.conn, far, rec.queue, target_bytes=10_000_000,
                         lease_ms=LEASE_MS,
                         hook=lambda point: point == "after_delete" and finishing.set())
        took = time.monotonic() - started
    finally:
        racer.join(60)
        proxy.close()
    assert not errors, errors
    # the run outlasted its lease several times over (else this test shows nothing) ...
    assert took > 3 * LEASE_MS / 1000 and proxy.delayed >= at_least
    # ... and no other fold got the lease until the compaction was done with it
    assert len(tries) > 10 and folded == [(1, True)]
    assert (report.packs, report.objects_before, report.objects_after) == (
        1, TINY_OBJECTS, 2)
    the_plan = plan(remote, rec.queue)
    assert len(the_plan.chain) == 3 and not the_plan.orphans  # the pack, the newest, the fold's
    verify(remote, progress=False, floor=floor_path)
    ids, _ = restored(remote, tmp_path / "r", rec.queue)
    assert ids == rec.written_ids()


def run_child(spec: dict[str, object]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, CHILD, json.dumps(spec)], capture_output=True,
                          text=True, timeout=60)


KILLS = [(point, 1) for point in COMPACT_CRASH_POINTS] + [("after_pack_put", 2),
                                                          ("during_delete", 2)]
"""Every step once, and the steps that repeat (a second pack, a later delete) again."""


@pytest.mark.parametrize("server_name", ["seaweed", "moto"])
@pytest.mark.parametrize(("point", "at"), KILLS)
def test_kill_9_at_every_step_restores_exactly_and_a_rerun_completes(
        point: str, at: int, server_name: str, request: pytest.FixtureRequest, rec: Recorder,
        server_url: str, floor_path: Path, tmp_path: Path) -> None:
    server = request.getfixturevalue(server_name)
    remote = remote_on(server, bucket_name(), "archive/", retries=2, backoff_s=0.01)
    rec.add(40)
    rec.malformed()
    rec.add(9)
    fold(rec, floor_path, remote)
    before = restored(remote, tmp_path / "before", rec.queue)
    target = four_objects(remote, rec.queue)
    spec = {"url": server_url, "queue": rec.queue, "point": point, "at": at,
            "target_bytes": target, "lease_ms": 1_000,
            "remote": remote_spec(remote, server)}
    child = run_child(spec)
    assert child.returncode == -9, child.stderr[-2000:]

    assert restored(remote, tmp_path / "killed", rec.queue) == before
    verify(remote, progress=False, floor=floor_path)
    # the rerun (once the dead one's lease lapsed) completes: packs only, no leftovers
    report = compact(rec.conn, remote, rec.queue, target_bytes=target, wait_ms=5_000)
    the_plan = plan(remote, rec.queue)
    assert sorted(remote.list_slices(rec.queue), key=lambda r: r.sort_key()) == list(
        the_plan.chain)
    assert report.objects_after == len(the_plan.chain) < 10
    assert restored(remote, tmp_path / "rerun", rec.queue) == before
    verify(remote, progress=False, floor=floor_path)
    rec.add(5)
    fold(rec, floor_path, remote)  # the fold continues the chain after it
    assert folded_ids(remote, rec.queue) == rec.written_ids()


@contextmanager
def a_store_that_fails(name: str, request: pytest.FixtureRequest, folder: Path
                       ) -> Iterator[tuple[S3Remote, Callable[[], None], Callable[[], None]]]:
    """(remote, fail, recover) on a store that can go away mid-compaction: a private
    SeaweedFS stopped and started again on the same folder, or moto behind a proxy that
    answers 503 to everything while down (moto keeps its objects in memory: a stopped
    moto would come back empty)."""
    if name == "seaweed":
        with SeaweedS3(folder) as weed:
            weed.start()
            yield (remote_on(weed, bucket_name(), "archive/", retries=1, backoff_s=0.01),
                   weed.stop, weed.start)
        return
    server = request.getfixturevalue(name)
    bucket = remote_on(server, bucket_name(), "archive/").bucket
    proxy = FlakyProxy(server.endpoint_url)
    try:
        yield (S3Remote(bucket, "archive/", proxy.endpoint_url, "us-east-1",
                        server.access_key, server.secret_key, retries=1, backoff_s=0.01),
               lambda: setattr(proxy, "down", True), lambda: setattr(proxy, "down", False))
    finally:
        proxy.close()


@pytest.mark.parametrize("store", [pytest.param("seaweed", marks=pytest.mark.slow), "moto"])
@pytest.mark.parametrize("point", ["after_pack_put", "after_manifest"])
def test_a_store_that_fails_mid_compaction_leaves_a_restorable_bucket(
        point: str, store: str, request: pytest.FixtureRequest, rec: Recorder,
        tmp_path: Path) -> None:
    with a_store_that_fails(store, request, tmp_path / "store") as (remote, fail, recover):
        rec.add(40)
        fold(rec, tmp_path / "floor", remote)
        before = restored(remote, tmp_path / "before", rec.queue)

        def hook(name: str) -> None:
            if name == point:
                fail()

        with pytest.raises(RemoteUnavailable):
            compact(rec.conn, remote, rec.queue, target_bytes=10_000_000, hook=hook)
        recover()
        assert restored(remote, tmp_path / "after", rec.queue) == before
        verify(remote, progress=False, floor=tmp_path / "floor")
        compact(rec.conn, remote, rec.queue, target_bytes=10_000_000)
        assert len(remote.list_slices(rec.queue)) == 2
        assert restored(remote, tmp_path / "rerun", rec.queue) == before


def test_the_command_line(rec: Recorder, server_url: str, seaweed: SeaweedS3,
                          floor_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = remote_on(seaweed, bucket_name(), "archive/")
    rec.add(30)
    fold(rec, floor_path, remote)
    for name, value in {"EMQ_S3_ENDPOINT_URL": seaweed.endpoint_url,
                        "EMQ_S3_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": seaweed.access_key,
                        "AWS_SECRET_ACCESS_KEY": seaweed.secret_key,
                        "EMQ_URL": server_url}.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(archive_cli, ["compact", rec.queue])
    assert result.exit_code == 2 and "needs --bucket" in result.output
    result = CliRunner().invoke(archive_cli, ["compact", rec.queue, "--bucket", remote.bucket,
                                              "--s3-prefix", "archive/", "--json"])
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert (row["objects_before"], row["objects_after"], row["packs"]) == (6, 2, 1)
    assert len(remote.list_slices(rec.queue)) == 2
