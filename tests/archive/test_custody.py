"""Custody of the stream: who may trim it.

Issue 8, item 15: a store that answers 200 and keeps nothing never gets the stream trimmed.
A real HTTP proxy sits in front of SeaweedFS or moto and answers 200 to PUTs without
forwarding them; the driver must see, before trimming, that the objects are not there.

Issue 20, item 12: the archive of record is claimed explicitly, never by a floor-only fold
that happened to trim first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from echomq.archive import Driver, Floor, S3Remote, declare, restore, verify
from echomq.errors import InvalidArgument, RemoteUnavailable
from echomq.queue.connection import Connection, connect
from echomq.queue.declared import archive_of_record
from tests.support.archive import bucket_name, folded_ids, remote_on
from tests.support.proxies import FlakyProxy
from tests.support.recorder import Recorder

SWALLOW: dict[str, Callable[[str], bool]] = {
    "every-put": lambda path: True,
    "slices": lambda path: "/slices/" in path,
    "manifest": lambda path: path.endswith("/manifest.json"),
}


@pytest.fixture(params=["seaweed", "moto"])
def s3(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


@pytest.fixture
def proxy(s3: Any) -> Iterator[FlakyProxy]:
    server = FlakyProxy(s3.endpoint_url)
    yield server
    server.close()


def through(proxy: FlakyProxy, s3: Any, bucket: str) -> S3Remote:
    return S3Remote(bucket, "archive/", proxy.endpoint_url, "us-east-1", s3.access_key,
                    s3.secret_key, retries=1, backoff_s=0.01)


@pytest.mark.parametrize("swallowed", sorted(SWALLOW))
def test_a_store_that_keeps_nothing_never_gets_the_stream_trimmed(
        swallowed: str, rec: Recorder, s3: Any, proxy: FlakyProxy, floor_path: Path,
        tmp_path: Path) -> None:
    direct = remote_on(s3, bucket_name(), "archive/", retries=1, backoff_s=0.01)
    lying = through(proxy, s3, direct.bucket)
    rec.add(30)
    proxy.swallow = SWALLOW[swallowed]
    with Floor(floor_path) as floor:
        with pytest.raises(RemoteUnavailable, match="nothing is trimmed") as info:
            Driver(rec.conn, floor, lying, slice_count=10).fold(rec.queue)
        assert proxy.swallowed >= 1
        assert type(info.value).__name__ == "UploadUnconfirmed"
        assert info.value.report.trimmed == 0  # type: ignore[attr-defined]
        assert rec.conn.redis.xlen(rec.key) == 30
        assert floor.status(rec.queue).pending == 1  # committed, not counted as uploaded

        proxy.swallow = None  # the store is healthy again: the next fold converges
        report = Driver(rec.conn, floor, lying, slice_count=10).fold(rec.queue)
        assert (report.uploaded, report.trimmed) == (3, 30)
        assert rec.conn.redis.xlen(rec.key) == 0
    written = rec.written_ids()
    assert folded_ids(direct, rec.queue) == written
    assert verify(direct, [rec.queue], progress=False)[rec.queue].entries == 30
    assert restore(direct, tmp_path / "again", progress=False)[rec.queue].entries == 30


def test_a_slice_lost_after_its_upload_is_caught_before_the_trim(
        rec: Recorder, s3: Any, proxy: FlakyProxy, floor_path: Path) -> None:
    """The object vanished between the PUT and the trim (a store that drops writes
    later): the HEAD before the trim sees it is gone."""
    direct = remote_on(s3, bucket_name(), "archive/", retries=1, backoff_s=0.01)
    rec.add(10)

    def drop(point: str) -> None:
        if point == "before_manifest":
            ref = direct.list_slices(rec.queue)[0]
            direct.client.delete_object(Bucket=direct.bucket, Key=direct.prefix + ref.name)

    with pytest.raises(RemoteUnavailable, match="does not have the object"):
        Driver(rec.conn, floor_path, direct, slice_count=10, hook=drop).fold(rec.queue)
    assert rec.conn.redis.xlen(rec.key) == 10
    report = Driver(rec.conn, floor_path, direct, slice_count=10).fold(rec.queue)
    assert (report.uploaded, report.trimmed) == (1, 10)
    assert len(folded_ids(direct, rec.queue)) == 10


# -- the archive of record is never claimed by a floor-only fold (issue 20, item 12) ---------


def fold_cli(*args: str) -> Any:
    """``emq archive fold ...`` through click, stdout and stderr apart."""
    from click.testing import CliRunner

    from echomq.cli import main as emq

    return CliRunner().invoke(emq, ["archive", "fold", *args], catch_exceptions=False)


def test_a_one_off_floor_only_fold_takes_nothing_from_the_s3_driver(
        rec: Recorder, weed_remote: S3Remote, tmp_path: Path) -> None:
    """``emq archive fold Q`` with no remote, in some folder, before the production S3
    driver ever ran: it folds a copy into its floor and trims nothing, so the S3 driver
    then folds every entry into the bucket, with no StreamGap, and becomes the record."""
    rec.add(30)
    one_off = fold_cli(rec.queue, "--url", rec.conn.url, "--floor", str(tmp_path / "one-off"),
                       "--slice-count", "10", "--json")
    assert one_off.exit_code == 0, one_off.output
    assert json.loads(one_off.stdout)["entries"] == 30
    assert json.loads(one_off.stdout)["trimmed"] == 0
    assert f"not trimmed {rec.queue}: no archive of record is declared" in one_off.stderr
    assert "--claim-custody" in one_off.stderr
    assert rec.conn.redis.xlen(rec.key) == 30
    assert archive_of_record(rec.conn, rec.queue) is None
    assert rec.conn.redis.hget(rec.conn.keys(rec.queue).meta, "folded") is None

    with Floor(tmp_path / "production") as floor:
        report = Driver(rec.conn, floor, weed_remote, slice_count=10).fold(rec.queue)
    assert (report.entries, report.trimmed, report.trim_refused) == (30, 30, None)
    assert folded_ids(weed_remote, rec.queue) == rec.written_ids()
    assert archive_of_record(rec.conn, rec.queue) == weed_remote.record_address()
    # and the one-off floor, folded again, still never trims what the bucket holds
    rec.add(5)
    again = Driver(rec.conn, tmp_path / "one-off").fold(rec.queue)
    assert again.trimmed == 0 and "is s3://" in (again.trim_refused or "")


def test_claiming_the_record_for_a_floor_is_explicit(
        rec: Recorder, tmp_path: Path) -> None:
    """``--claim-custody`` (or ``claim_custody=True``, or declaring the floor) makes a floor
    the record: that fold trims, and the record names the floor."""
    rec.add(12)
    claimed = fold_cli(rec.queue, "--url", rec.conn.url, "--floor", str(tmp_path / "floor"),
                       "--claim-custody", "--json")
    assert claimed.exit_code == 0, claimed.output
    assert json.loads(claimed.stdout)["trimmed"] == 12 and "not trimmed" not in claimed.stderr
    with Floor(tmp_path / "floor") as floor:
        assert archive_of_record(rec.conn, rec.queue) == floor.record_address()
    assert rec.conn.redis.xlen(rec.key) == 0

    other = f"{rec.queue}-lib"
    declare(rec.conn, other)
    Recorder(rec.conn, other).add(4)
    with Floor(tmp_path / "lib") as floor:
        assert Driver(rec.conn, floor).fold(other).trimmed == 0  # unasked: a copy
        report = Driver(rec.conn, floor, claim_custody=True).fold(other)
        assert report.trimmed == 4 and archive_of_record(rec.conn, other) == \
            floor.record_address()
    with pytest.raises(InvalidArgument, match="claim_custody"):
        Driver(rec.conn, tmp_path / "lib", claim_custody="yes")  # type: ignore[arg-type]


def test_a_driver_told_never_to_claim_leaves_an_unset_record_alone(
        rec: Recorder, weed_remote: S3Remote, tmp_path: Path) -> None:
    rec.add(3)
    report = Driver(rec.conn, tmp_path / "floor", weed_remote,
                    claim_custody=False).fold(rec.queue)
    assert (report.uploaded, report.trimmed) == (1, 0)
    assert "no archive of record is declared" in (report.trim_refused or "")
    assert archive_of_record(rec.conn, rec.queue) is None


def test_the_scheduler_claims_a_floor_only_with_claim_custody(
        rconn: Connection, tmp_path: Path) -> None:
    """``emq scheduler --fold`` without a bucket folds copies and trims nothing; with
    ``--claim-custody`` its floor becomes the record and the stream is trimmed."""
    import os
    import signal
    import subprocess
    import sys
    import uuid

    from tests.support import ROOT
    from tests.support.waits import wait_until

    # The scheduler folds every declared queue of its prefix: a prefix of its own keeps
    # the other tests' queues (on the shared server) out of its claim.
    prefix = f"custody{uuid.uuid4().hex[:8]}"
    rec = Recorder(connect(rconn.url, prefix=prefix), "sched")
    rec.key = rec.conn.keys(rec.queue).completions
    declare(rec.conn, rec.queue)
    rec.add(6)
    env = {**os.environ, "EMQ_URL": rec.conn.url, "EMQ_PREFIX": prefix, "EMQ_S3_BUCKET": ""}

    def scheduler(floor: Path, *flags: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "echomq", "scheduler", "--fold", "--no-cron",
             "--no-retention", "--fold-interval", "200ms", "--floor", str(floor), *flags],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def folded(floor: Path) -> int:
        if not (floor / "data.mdb").exists():
            return 0
        with Floor(floor) as opened:
            return opened.status(rec.queue).entries if rec.queue in opened.queues() else 0

    for flags, trimmed in (((), False), (("--claim-custody",), True)):
        floor = tmp_path / f"floor-{len(flags)}"
        proc = scheduler(floor, *flags)
        try:
            wait_until(lambda floor=floor: folded(floor) == 6, timeout=60, step=0.2)
            if trimmed:
                wait_until(lambda: rec.conn.redis.xlen(rec.key) == 0, timeout=60, step=0.2)
            else:
                time.sleep(1)  # a few more passes: still nothing trimmed
                assert rec.conn.redis.xlen(rec.key) == 6
                assert archive_of_record(rec.conn, rec.queue) is None
        finally:
            proc.send_signal(signal.SIGTERM)
            out = proc.communicate(timeout=30)[0]
        assert proc.returncode == 0, out
        if not trimmed:
            warned = [line for line in out.splitlines()
                      if "WARNING" in line and "no archive of record is declared" in line
                      and rec.queue in line]
            assert len(warned) == 1, out  # a warning once, not one a pass
    with Floor(tmp_path / "floor-1") as floor:
        assert archive_of_record(rec.conn, rec.queue) == floor.record_address()
    rec.conn.close()


def test_the_old_custody_and_heartbeat_names_are_gone(rec: Recorder, tmp_path: Path) -> None:
    """Issue 21 renamed custody's and the driver heartbeat's code names to the glossary's
    words (CHANGELOG.md lists them), with no alias: an old flag is refused by click, an
    old keyword by Python, and the new ones work."""
    from click.testing import CliRunner

    from echomq.cli import main as emq

    floor = str(tmp_path / "floor")
    old_fold = fold_cli(rec.queue, "--url", rec.conn.url, "--floor", floor, "--claim-record")
    assert old_fold.exit_code == 2
    assert "No such option '--claim-record'. Did you mean '--claim-custody'?" in old_fold.output
    old_declare = CliRunner().invoke(emq, ["archive", "declare", rec.queue, "--url",
                                           rec.conn.url, "--record", "floor"])
    assert old_declare.exit_code == 2 and "No such option '--record'" in old_declare.output
    old_scheduler = CliRunner().invoke(emq, ["scheduler", "--fold", "--claim-record"])
    assert old_scheduler.exit_code == 2
    assert "No such option '--claim-record'" in old_scheduler.output

    with pytest.raises(TypeError, match="claim_record"):
        Driver(rec.conn, tmp_path / "old", claim_record=True)  # type: ignore[call-arg]
    declared = CliRunner().invoke(emq, ["archive", "declare", rec.queue, "--url",
                                        rec.conn.url, "--custodian", "floor", "--floor", floor])
    assert declared.exit_code == 0, declared.output
    with Floor(floor) as opened:
        assert archive_of_record(rec.conn, rec.queue) == opened.record_address()
    with Driver(rec.conn, tmp_path / "new", claim_custody=True) as driver:
        assert driver.claim_custody is True and not hasattr(driver, "claim_record")
        assert driver.heartbeat() >= 1 and not hasattr(driver, "beat")
