"""Issue 13, item 4: retention. A queue's floor and bucket forget the slices whose newest
outcome is older than its policy, exactly those; the manifest records what was dropped,
and verify, restore and point-in-time restore still pass from the recorded point."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from echomq.archive import (
    PRUNE_CRASH_POINTS,
    Driver,
    Floor,
    S3Remote,
    declare,
    keep_of,
    prune,
    prune_declared,
    restore,
    set_keep,
    verify,
)
from echomq.archive.fold_lease import FoldLease
from echomq.cli.archive import archive_cli
from echomq.errors import InvalidArgument, LeaseHeld
from echomq.scheduling.scheduler import BatchScheduler
from echomq.servers.seaweed import SeaweedS3
from tests.support.aged import DAY_MS, add_aged
from tests.support.archive import bucket_name, floor_ids, folded_ids, remote_on
from tests.support.proxies import FlakyProxy
from tests.support.recorder import Recorder

KEEP = 400 * DAY_MS


def fold(rec: Recorder, floor: Path, remote: S3Remote | None, count: int = 10) -> None:
    driver = Driver(rec.conn, floor, remote, slice_count=count)
    try:
        assert driver.fold(rec.queue).error is None
    finally:
        driver.close()


def three_ages(rec: Recorder, floor: Path, remote: S3Remote | None) -> tuple[list[str], ...]:
    """Slices of 10: two 500 days old, two 420 days old, one straddling the cutoff (5
    entries 401 days old, 5 entries 399 days old), one 10 days old."""
    oldest = add_aged(rec, 500, 20)
    old = add_aged(rec, 420, 20)
    straddling = add_aged(rec, 401, 5) + add_aged(rec, 399, 5)
    recent = add_aged(rec, 10, 10)
    fold(rec, floor, remote)
    return oldest + old, straddling, recent


def test_prune_drops_exactly_the_old_slices_from_floor_and_bucket(
        rec: Recorder, remote: S3Remote, floor_path: Path, tmp_path: Path) -> None:
    dropped, straddling, recent = three_ages(rec, floor_path, remote)
    kept = straddling + recent
    assert len(remote.list_slices(rec.queue)) == 6
    before = verify(remote, progress=False, floor=floor_path)[rec.queue]

    set_keep(rec.conn, rec.queue, KEEP)
    assert keep_of(rec.conn, rec.queue) == KEEP
    report = prune(rec.conn, rec.queue, floor=floor_path, remote=remote)

    assert (report.slices, report.entries, report.deleted) == (4, 40, 4)
    assert (report.floor_slices, report.floor_entries, report.through) == (4, 40, dropped[-1])
    assert report.policy == "keep=400d"
    with Floor(floor_path) as floor:
        assert floor_ids(floor, rec.queue) == kept  # the straddling slice is kept whole
        assert floor.history(rec.queue, "job-0") == []
        assert [e.job_id for e in floor.history(rec.queue, "job-20")] == []
        assert [e.job_id for e in floor.history(rec.queue, "job-40")] == ["job-40"]
        assert len(floor.audit(rec.queue)) == 20
        status = floor.status(rec.queue)
        assert (status.entries, status.slices, status.pending) == (20, 2, 0)
    assert folded_ids(remote, rec.queue) == kept
    assert len(remote.list_slices(rec.queue)) == 2
    manifest = remote.read_manifest(rec.queue)
    assert manifest is not None
    assert (manifest.base.through, manifest.base.slices, manifest.base.entries) == (
        dropped[-1], 4, 40)
    assert manifest.entries == 20 and manifest.head == recent[-1]
    [record] = manifest.pruned
    assert (record.first, record.through, record.slices, record.entries, record.policy) == (
        dropped[0], dropped[-1], 4, 40, "keep=400d")
    assert record.digest == manifest.base.digest

    # verify passes from the recorded point (against the floor, and the pin kept before)
    after = verify(remote, progress=False, floor=floor_path,
                   pins={rec.queue: before.head_digest})[rec.queue]
    assert (after.slices, after.entries, after.pruned_through) == (2, 20, dropped[-1])
    assert after.head_digest == before.head_digest
    # restore holds exactly what remains; a point in time too
    restored = restore(remote, tmp_path / "restored", progress=False)[rec.queue]
    assert restored.entries == 20
    with Floor(tmp_path / "restored") as floor, Floor(floor_path) as original:
        assert floor_ids(floor, rec.queue) == kept
        assert floor.digest(rec.queue) == original.digest(rec.queue)
    restore(remote, tmp_path / "pit", progress=False, until=kept[4])
    with Floor(tmp_path / "pit") as floor:
        assert floor_ids(floor, rec.queue) == kept[:5]
    with pytest.raises(InvalidArgument, match="pruned through"):
        restore(remote, tmp_path / "too-early", progress=False, until=dropped[3])

    # a second prune finds nothing more; the chain goes on from the pruned point
    assert prune(rec.conn, rec.queue, floor=floor_path, remote=remote).slices == 0
    later = add_aged(rec, 0, 10)
    fold(rec, floor_path, remote)
    fold(rec, tmp_path / "restored", remote)  # a floor restored after the prune folds on
    verify(remote, progress=False, floor=floor_path)
    verify(remote, progress=False, floor=tmp_path / "restored")
    assert folded_ids(remote, rec.queue) == kept + later


def test_everything_older_goes_and_the_chain_restarts_at_the_base(
        rec: Recorder, remote: S3Remote, floor_path: Path, tmp_path: Path) -> None:
    old = add_aged(rec, 500, 30)
    fold(rec, floor_path, remote)
    report = prune(rec.conn, rec.queue, floor=floor_path, remote=remote, keep=KEEP)
    assert (report.slices, report.entries) == (3, 30)
    assert remote.list_slices(rec.queue) == []
    assert verify(remote, progress=False, floor=floor_path)[rec.queue].entries == 0
    restored = restore(remote, tmp_path / "fresh", progress=False)[rec.queue]
    assert (restored.entries, restored.head) == (0, old[-1])
    new = add_aged(rec, 0, 10)
    fold(rec, tmp_path / "fresh", remote)  # no StreamGap: the dropped entries are accounted
    assert folded_ids(remote, rec.queue) == new
    verify(remote, progress=False, floor=tmp_path / "fresh")
    with Floor(tmp_path / "fresh") as floor:
        assert floor_ids(floor, rec.queue) == new


@pytest.mark.parametrize("point", PRUNE_CRASH_POINTS)
def test_a_prune_stopped_at_each_step_restores_and_a_rerun_completes(
        point: str, rec: Recorder, remote: S3Remote, floor_path: Path, tmp_path: Path) -> None:
    dropped, straddling, recent = three_ages(rec, floor_path, remote)

    class Stop(Exception):
        pass

    def hook(name: str) -> None:
        if name == point:
            raise Stop(name)

    with pytest.raises(Stop):
        prune(rec.conn, rec.queue, floor=floor_path, remote=remote, keep=KEEP, hook=hook)
    verify(remote, progress=False, floor=floor_path)  # a floor not yet pruned still agrees
    restore(remote, tmp_path / "mid", progress=False)
    with Floor(tmp_path / "mid") as floor:
        assert floor_ids(floor, rec.queue) == straddling + recent
    report = prune(rec.conn, rec.queue, floor=floor_path, remote=remote, keep=KEEP)
    assert report.floor_entries == 40
    assert len(remote.list_slices(rec.queue)) == 2
    with Floor(floor_path) as floor:
        assert floor_ids(floor, rec.queue) == straddling + recent


def test_a_floor_alone_forgets_its_own_old_slices(rec: Recorder, floor_path: Path) -> None:
    dropped, straddling, recent = three_ages(rec, floor_path, None)
    report = prune(rec.conn, rec.queue, floor=floor_path, keep=KEEP)
    assert (report.slices, report.entries, report.floor_entries) == (4, 40, 40)
    with Floor(floor_path) as floor:
        assert floor_ids(floor, rec.queue) == straddling + recent
        assert floor.status(rec.queue).slices == 2
    later = add_aged(rec, 0, 5)
    fold(rec, floor_path, None)
    with Floor(floor_path) as floor:
        assert floor_ids(floor, rec.queue) == straddling + recent + later


def test_what_prune_refuses(rec: Recorder, remote: S3Remote, floor_path: Path) -> None:
    three_ages(rec, floor_path, remote)
    with pytest.raises(InvalidArgument, match="no archive retention policy"):
        prune(rec.conn, rec.queue, floor=floor_path, remote=remote)
    set_keep(rec.conn, rec.queue, KEEP)
    set_keep(rec.conn, rec.queue, None)
    assert keep_of(rec.conn, rec.queue) is None
    with pytest.raises(InvalidArgument, match="positive"):
        prune(rec.conn, rec.queue, floor=floor_path, remote=remote, keep=0)
    with pytest.raises(InvalidArgument, match="a floor, a remote"):
        prune(rec.conn, rec.queue, keep=KEEP)
    with pytest.raises(InvalidArgument, match="uploads"):  # it would forget other slices
        prune(rec.conn, rec.queue, floor=floor_path, keep=KEEP)
    with FoldLease(rec.conn, rec.queue, 10_000), \
            pytest.raises(LeaseHeld):  # a fold (or a compaction) is running
        prune(rec.conn, rec.queue, floor=floor_path, remote=remote, keep=KEEP)
    with Floor(floor_path) as floor:
        assert len(floor_ids(floor, rec.queue)) == 60  # nothing was dropped


def test_the_command_line(rec: Recorder, server_url: str, seaweed: SeaweedS3,
                          floor_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    remote = remote_on(seaweed, bucket_name(), "archive/")
    dropped, straddling, recent = three_ages(rec, floor_path, remote)
    for name, value in {"EMQ_S3_BUCKET": remote.bucket, "EMQ_S3_PREFIX": "archive/",
                        "EMQ_S3_ENDPOINT_URL": seaweed.endpoint_url,
                        "EMQ_S3_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": seaweed.access_key,
                        "AWS_SECRET_ACCESS_KEY": seaweed.secret_key, "EMQ_URL": server_url,
                        "EMQ_FLOOR": str(floor_path)}.items():
        monkeypatch.setenv(name, value)
    code, out = invoke("prune", rec.queue)
    assert code == 1 and "no archive retention policy" in out
    code, out = invoke("prune", "--keep", "400", rec.queue)
    assert code == 2 and "not a duration" in out
    code, out = invoke("prune", "--keep", "400d", "--save", rec.queue, "--json")
    assert code == 0, out
    [row] = json.loads(out)
    assert (row["slices"], row["entries"], row["through"], row["policy"]) == (
        4, 40, dropped[-1], "keep=400d")
    assert keep_of(rec.conn, rec.queue) == KEEP
    code, out = invoke("prune", rec.queue)  # the stored policy; nothing more to drop
    assert code == 0 and "0 slices, 0 entries dropped" in out
    with Floor(floor_path) as floor:
        assert floor_ids(floor, rec.queue) == straddling + recent


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(archive_cli, list(args))
    return result.exit_code, result.output


def test_the_scheduler_applies_each_declared_queues_policy(
        rec: Recorder, remote: S3Remote, floor_path: Path) -> None:
    dropped, straddling, recent = three_ages(rec, floor_path, remote)
    other = Recorder(rec.conn, rec.queue + "-nopolicy")
    declare(rec.conn, other.queue)
    add_aged(other, 500, 10)
    fold(other, floor_path, remote)
    set_keep(rec.conn, rec.queue, KEEP)
    with Floor(floor_path) as floor:
        batch = BatchScheduler(rec.conn)
        batch.add_fold(partial(prune_declared, rec.conn, floor, remote), interval_ms=60_000,
                       name="prune")
        with batch:
            deadline = time.monotonic() + 10
            while len(floor_ids(floor, rec.queue)) != 20 and time.monotonic() < deadline:
                time.sleep(0.05)
        assert floor_ids(floor, rec.queue) == straddling + recent
        assert len(floor_ids(floor, other.queue)) == 10  # no policy: kept forever


@pytest.mark.slow
def test_a_prune_listing_a_bucket_slower_than_its_lease_keeps_the_lease(
        rec: Recorder, moto: Any, floor_path: Path) -> None:
    """A year of folds every 30 s is a million objects: listed a page at a time, longer
    than a lease, with no renewal between pages before (LeaseLost before the floor forgot
    anything, on every rerun)."""
    remote = remote_on(moto, bucket_name(), "archive/", retries=2, backoff_s=0.01)
    old = add_aged(rec, 500, 60)
    add_aged(rec, 10, 1)
    fold(rec, floor_path, remote, count=1)
    proxy = FlakyProxy(moto.endpoint_url)
    far = S3Remote(remote.bucket, "archive/", proxy.endpoint_url, "us-east-1",
                   moto.access_key, moto.secret_key, retries=1, backoff_s=0.01, page_size=10)
    proxy.slow, proxy.delay_s = (lambda path: "list-type=" in path), 0.4
    try:
        started = time.monotonic()
        report = prune(rec.conn, rec.queue, floor=floor_path, remote=far, keep=KEEP,
                       lease_ms=1_500)
        took = time.monotonic() - started
    finally:
        proxy.close()
    assert took > 2 * 1.5  # seven listed pages at 0.4 s: over two leases
    assert (report.deleted, report.floor_slices) == (60, 60)
    with Floor(floor_path) as floor:
        left = floor_ids(floor, rec.queue)
    assert folded_ids(remote, rec.queue) == left == [rec.written_ids()[-1]]
    assert not set(old) & set(left)
