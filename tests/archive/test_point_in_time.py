"""Point-in-time restore: a floor holding exactly the outcomes recorded up to a moment (or a
stream id), rebuilt from the bucket alone and verified along the chain up to that point;
slices after it are never read."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

import echomq
from echomq.archive import Driver, Floor, S3Remote, declare, restore
from echomq.cli import main as emq
from echomq.errors import ChecksumMismatch, InvalidArgument, MissingSlice
from echomq.servers.seaweed import SeaweedS3
from tests.support.archive import floor_ids
from tests.support.waits import server_ms


def settle(conn: echomq.Connection, queue: str, n: int) -> None:
    """``n`` outcomes through the public verbs: every third one dead."""
    echomq.add_many(conn, queue, [{"n": i} for i in range(n)], max_attempts=1)
    for job in echomq.claim(conn, queue, lease_ms=10_000, count=n):
        if job.payload["n"] % 3 == 0:
            echomq.fail(conn, queue, job.id, job.token, "broken")
        else:
            echomq.complete(conn, queue, job.id, job.token, job.payload["n"])


def fold(conn: echomq.Connection, queue: str, path: Path, remote: S3Remote) -> None:
    driver = Driver(conn, path, remote, slice_count=4)
    try:
        driver.fold(queue)
    finally:
        driver.close()


def tamper(remote: S3Remote, name: str) -> None:
    """Flip one byte of a slice object in the bucket, its metadata kept."""
    key = remote.prefix + name
    data = bytearray(remote.client.get_object(Bucket=remote.bucket, Key=key)["Body"].read())
    data[len(data) // 2] ^= 0xFF
    head = remote.client.head_object(Bucket=remote.bucket, Key=key)
    remote.client.put_object(Bucket=remote.bucket, Key=key, Body=bytes(data),
                             Metadata=head["Metadata"])


def test_a_restore_until_t_matches_the_audit_taken_at_t(rconn: echomq.Connection, queue: str,
                                                        remote: S3Remote,
                                                        tmp_path: Path) -> None:
    declare(rconn, queue)
    live = tmp_path / "floor"
    settle(rconn, queue, 10)
    fold(rconn, queue, live, remote)
    time.sleep(0.01)
    at_t = server_ms(rconn.redis)
    with Floor(live) as floor:
        audit_t = floor.audit(queue)
        dead_t = floor.audit(queue, "dead")
    time.sleep(0.01)
    settle(rconn, queue, 7)
    fold(rconn, queue, live, remote)

    report = restore(remote, tmp_path / "then", progress=False, until=at_t)[queue]
    assert report.entries == len(audit_t) == 10
    with Floor(tmp_path / "then") as then:
        assert then.audit(queue) == audit_t
        assert then.audit(queue, "dead") == dead_t
    as_datetime = datetime.fromtimestamp(at_t / 1000, tz=UTC)
    restore(remote, tmp_path / "then-dt", progress=False, until=as_datetime)
    with Floor(tmp_path / "then-dt") as then, Floor(live) as now:
        assert then.audit(queue) == audit_t
        assert len(now.audit(queue)) == 17
        # a later full restore into the point-in-time floor resumes to the whole history
        restore(remote, then, progress=False)
        assert then.digest(queue) == now.digest(queue)


def test_a_cut_inside_a_slice_keeps_exactly_the_entries_up_to_it(
        rconn: echomq.Connection, queue: str, weed_remote: S3Remote, tmp_path: Path) -> None:
    declare(rconn, queue)
    settle(rconn, queue, 10)
    fold(rconn, queue, tmp_path / "floor", weed_remote)
    with Floor(tmp_path / "floor") as live:
        ids = floor_ids(live, queue)
    refs = weed_remote.list_slices(queue)
    assert [r.last for r in refs] == [ids[3], ids[7], ids[9]]
    report = restore(weed_remote, tmp_path / "cut", progress=False, until=ids[5])[queue]
    assert (report.entries, report.slices, report.head) == (6, 2, ids[5])
    with Floor(tmp_path / "cut") as cut:
        assert floor_ids(cut, queue) == ids[:6]
        assert cut.checkpoint(queue) == ids[5]
    with pytest.raises(InvalidArgument):
        restore(weed_remote, tmp_path / "bad", progress=False, until="not-an-id")


def test_until_before_anything_gives_an_empty_floor(rconn: echomq.Connection, queue: str,
                                                    weed_remote: S3Remote,
                                                    tmp_path: Path) -> None:
    declare(rconn, queue)
    settle(rconn, queue, 5)
    fold(rconn, queue, tmp_path / "floor", weed_remote)
    report = restore(weed_remote, tmp_path / "empty", progress=False, until=1)[queue]
    assert (report.entries, report.slices) == (0, 0)
    with Floor(tmp_path / "empty") as empty:
        assert empty.audit(queue) == [] and empty.entries(queue) == []


def test_a_tampered_slice_matters_only_before_the_cut(rconn: echomq.Connection, queue: str,
                                                      remote: S3Remote,
                                                      tmp_path: Path) -> None:
    declare(rconn, queue)
    settle(rconn, queue, 12)
    fold(rconn, queue, tmp_path / "floor", remote)
    with Floor(tmp_path / "floor") as live:
        ids = floor_ids(live, queue)
    refs = remote.list_slices(queue)
    tamper(remote, refs[2].name)  # entries 8..11
    report = restore(remote, tmp_path / "before", progress=False, until=ids[6])[queue]
    assert report.entries == 7
    with pytest.raises(ChecksumMismatch, match=remote.address(refs[2].name)):
        restore(remote, tmp_path / "after", progress=False, until=ids[9])
    with pytest.raises(ChecksumMismatch):
        restore(remote, tmp_path / "all", progress=False)
    # a slice missing after the cut is not needed either; before it, it is
    remote.client.delete_object(Bucket=remote.bucket, Key=remote.prefix + refs[2].name)
    report = restore(remote, tmp_path / "gone", progress=False, until=ids[7])[queue]
    assert (report.entries, report.orphans) == (8, [])
    with pytest.raises(MissingSlice, match=refs[2].name):
        restore(remote, tmp_path / "gone-after", progress=False, until=ids[8])
    # into the live floor (past the point) nothing is refused and nothing removed
    restore(remote, tmp_path / "floor", progress=False, until=ids[3])
    with Floor(tmp_path / "floor") as live:
        assert floor_ids(live, queue) == ids


def test_emq_archive_restore_until(rconn: echomq.Connection, queue: str, seaweed: SeaweedS3,
                                   weed_remote: S3Remote, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    declare(rconn, queue)
    settle(rconn, queue, 6)
    fold(rconn, queue, tmp_path / "floor", weed_remote)
    with Floor(tmp_path / "floor") as live:
        ids = floor_ids(live, queue)
        at = [e.at for e in live.entries(queue)]
    for name, value in {"EMQ_S3_BUCKET": weed_remote.bucket,
                        "EMQ_S3_PREFIX": weed_remote.prefix,
                        "EMQ_S3_ENDPOINT_URL": seaweed.endpoint_url,
                        "EMQ_S3_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": seaweed.access_key,
                        "AWS_SECRET_ACCESS_KEY": seaweed.secret_key}.items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()
    out = runner.invoke(emq, ["archive", "restore", "--floor", str(tmp_path / "cli"),
                              "--until", ids[2], "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["entries"] == 3
    with Floor(tmp_path / "cli") as cut:
        assert floor_ids(cut, queue) == ids[:3]
    before = datetime.fromtimestamp((min(at) - 1) / 1000, tz=UTC).isoformat()
    out = runner.invoke(emq, ["archive", "restore", "--floor", str(tmp_path / "iso"),
                              "--until", before, "--json"])
    assert out.exit_code == 0, out.output
    with Floor(tmp_path / "iso") as empty:
        assert empty.entries(queue) == []


def test_an_outside_entry_from_the_future_never_makes_a_restore_drop_real_outcomes(
        rconn: echomq.Connection, queue: str, weed_remote: S3Remote, tmp_path: Path) -> None:
    """Another writer's XADD with an id in 2100: before, every later settle's entry took
    an id after it, and a restore up to now dropped them all."""
    declare(rconn, queue)
    settle(rconn, queue, 4)
    rconn.redis.xadd(rconn.keys(queue).completions, {"f": "v"}, id="4102444800000-0")
    settle(rconn, queue, 6)
    fold(rconn, queue, tmp_path / "floor", weed_remote)
    now = server_ms(rconn.redis)
    report = restore(weed_remote, tmp_path / "now", progress=False, until=now)[queue]
    assert report.entries == 10
    with Floor(tmp_path / "floor") as live, Floor(tmp_path / "now") as then:
        assert len(live.audit(queue)) == 10
        assert then.audit(queue) == live.audit(queue)
        assert all(int(sid.partition("-")[0]) <= now for sid in floor_ids(then, queue))
