"""Restore and verify from the remote alone: gaps and corruption are refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from echomq.archive import Driver, Floor, S3Remote, plan, restore, verify
from echomq.errors import ChecksumMismatch, MissingSlice
from tests.support.archive import floor_ids
from tests.support.recorder import Recorder


def folded(rec: Recorder, remote: S3Remote, path: Path, n: int = 50) -> list[str]:
    rec.add(n)
    Driver(rec.conn, path, remote, slice_count=10).fold(rec.queue)
    return rec.written_ids()


def test_a_missing_middle_slice_is_named(rec: Recorder, remote: S3Remote,
                                         tmp_path: Path) -> None:
    folded(rec, remote, tmp_path / "floor")
    refs = remote.list_slices(rec.queue)
    remote.client.delete_object(Bucket=remote.bucket, Key=remote.prefix + refs[2].name)
    with pytest.raises(MissingSlice, match=refs[1].last) as info:
        restore(remote, tmp_path / "new", progress=False)
    assert refs[3].name in str(info.value)
    with pytest.raises(MissingSlice):
        verify(remote, progress=False)


def test_a_missing_last_slice_is_caught_by_the_manifest(rec: Recorder, remote: S3Remote,
                                                        tmp_path: Path) -> None:
    folded(rec, remote, tmp_path / "floor")
    refs = remote.list_slices(rec.queue)
    remote.client.delete_object(Bucket=remote.bucket, Key=remote.prefix + refs[-1].name)
    with pytest.raises(MissingSlice, match="missing: the manifest lists it as slice 5 of 5"):
        restore(remote, tmp_path / "new", progress=False)


def test_a_corrupted_object_is_refused_by_name(rec: Recorder, remote: S3Remote,
                                               tmp_path: Path) -> None:
    folded(rec, remote, tmp_path / "floor")
    victim = remote.list_slices(rec.queue)[3]
    key = remote.prefix + victim.name
    data = bytearray(remote.client.get_object(Bucket=remote.bucket, Key=key)["Body"].read())
    data[len(data) // 2] ^= 0xFF
    head = remote.client.head_object(Bucket=remote.bucket, Key=key)
    remote.client.put_object(Bucket=remote.bucket, Key=key, Body=bytes(data),
                             Metadata=head["Metadata"])
    with pytest.raises(ChecksumMismatch, match=remote.address(victim.name)):
        verify(remote, progress=False)
    with pytest.raises(ChecksumMismatch, match=remote.address(victim.name)):
        restore(remote, tmp_path / "new", progress=False)
    with Floor(tmp_path / "new") as partial:  # what came before it is kept, whole
        assert partial.checkpoint(rec.queue) == remote.list_slices(rec.queue)[2].last


def test_an_interrupted_restore_resumes(rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    written = folded(rec, remote, tmp_path / "floor")
    victim = remote.list_slices(rec.queue)[3]
    key = remote.prefix + victim.name
    good = remote.client.get_object(Bucket=remote.bucket, Key=key)
    body, meta = good["Body"].read(), good["Metadata"]
    remote.client.put_object(Bucket=remote.bucket, Key=key, Body=b"torn", Metadata=meta)
    with pytest.raises(ChecksumMismatch):
        restore(remote, tmp_path / "new", progress=False)
    remote.client.put_object(Bucket=remote.bucket, Key=key, Body=body, Metadata=meta)
    report = restore(remote, tmp_path / "new", progress=False)[rec.queue]
    assert (report.skipped, report.slices) == (3, 2)
    with Floor(tmp_path / "new") as floor:
        assert floor_ids(floor, rec.queue) == written


def test_an_orphan_slice_is_skipped(rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    written = folded(rec, remote, tmp_path / "floor")
    refs = remote.list_slices(rec.queue)
    # a stalled driver's upload that was never linked in: same prev, a shorter cut
    orphan = remote.get_slice(refs[1])
    from echomq.archive.slices import build_slice

    cut = build_slice(rec.queue, orphan.meta.prev, list(orphan.items)[:4])
    remote.put_slice(cut)
    the_plan = plan(remote, rec.queue)
    assert [r.name for r in the_plan.orphans] == [cut.meta.name]
    assert list(the_plan.chain) == refs
    restore(remote, tmp_path / "new", progress=False)
    with Floor(tmp_path / "new") as floor:
        assert floor_ids(floor, rec.queue) == written


def test_restore_of_an_empty_remote_is_empty(remote: S3Remote, tmp_path: Path) -> None:
    assert restore(remote, tmp_path / "new", progress=False) == {}
    assert verify(remote, progress=False) == {}
