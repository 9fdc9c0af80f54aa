"""Issue 8, item 16: a forged slice and a cut history are refused, naming the slice.

The forger has the bucket's credentials: it rewrites objects and their ``sha256``
metadata, deletes slices and the manifest. Verify and restore must notice from the chain
of digests and the manifest alone; a forger that rewrites the chain and the manifest
consistently is caught against the floor's digests or a kept head digest.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from echomq.archive import Driver, Floor, RemoteConflict, S3Remote, restore, verify
from echomq.archive.slices import SliceRef
from echomq.errors import ChecksumMismatch, MissingSlice
from echomq.servers.seaweed import SeaweedS3
from tests.support.archive import bucket_name, floor_ids, remote_on
from tests.support.recorder import Recorder


def fold(rec: Recorder, remote: S3Remote, path: Path, n: int = 30) -> list[str]:
    rec.add(n)
    driver = Driver(rec.conn, path, remote, slice_count=10)
    driver.fold(rec.queue)
    driver.close()
    return rec.written_ids()


def put_raw(remote: S3Remote, ref: SliceRef, body: bytes) -> None:
    """Store ``body`` (uncompressed) under ``ref``'s name with a recomputed sha256."""
    data = gzip.compress(body, mtime=0)
    remote.client.put_object(Bucket=remote.bucket, Key=remote.prefix + ref.name, Body=data,
                             Metadata={"sha256": hashlib.sha256(data).hexdigest()})


def raw_body(remote: S3Remote, ref: SliceRef) -> list[bytes]:
    key = remote.prefix + ref.name
    data = remote.client.get_object(Bucket=remote.bucket, Key=key)["Body"].read()
    return list(gzip.decompress(data).split(b"\n"))


def forge_lines(lines: list[bytes]) -> list[bytes]:
    """Every entry's result replaced by FORGED; the header left as it was."""
    out = [lines[0]]
    for line in lines[1:-1]:
        entry = json.loads(line)
        entry["fields"]["result"] = "FORGED"
        out.append(json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode())
    return out + [b""]


@pytest.mark.parametrize("victim", [0, 1, 2])
def test_a_rewritten_slice_with_recomputed_sha256_is_refused_by_name(
        victim: int, rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    fold(rec, remote, tmp_path / "floor")
    ref = remote.list_slices(rec.queue)[victim]
    put_raw(remote, ref, b"\n".join(forge_lines(raw_body(remote, ref))))
    assert remote.get_slice(ref).items[0][1]["result"] == "FORGED"  # its checksum holds
    where = remote.address(ref.name)
    with pytest.raises(ChecksumMismatch, match=where) as info:
        verify(remote, progress=False)
    assert type(info.value).__name__ == "ChainBroken"
    with pytest.raises(ChecksumMismatch, match=where):
        restore(remote, tmp_path / "new", progress=False)
    with Floor(tmp_path / "new") as partial:  # nothing forged got in
        assert all(e.result != "FORGED" for e in partial.entries(rec.queue))


def test_the_newest_slice_and_the_manifest_deleted_are_refused(
        rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    written = fold(rec, remote, tmp_path / "floor")
    refs = remote.list_slices(rec.queue)
    remote.client.delete_object(Bucket=remote.bucket, Key=remote.prefix + refs[-1].name)
    remote.client.delete_object(Bucket=remote.bucket,
                                Key=f"{remote.prefix}{rec.queue}/manifest.json")
    with pytest.raises(MissingSlice, match="manifest.json is missing"):
        restore(remote, tmp_path / "new", progress=False)
    with pytest.raises(MissingSlice, match="rebuild"):
        verify(remote, progress=False)
    # asked to, it restores what the chain holds and says where it ends
    report = restore(remote, tmp_path / "new", progress=False,
                     rebuild_manifest=True)[rec.queue]
    assert (report.rebuilt, report.slices, report.entries) == (True, 2, 20)
    assert report.head == refs[1].last
    assert report.head_digest == remote.get_slice(refs[1]).meta.digest
    with Floor(tmp_path / "new") as floor:
        assert floor_ids(floor, rec.queue) == written[:20]
    # the floor that uploaded the cut slice knows better
    with pytest.raises(MissingSlice, match="newest history was removed"):
        verify(remote, progress=False, rebuild_manifest=True, floor=tmp_path / "floor")


def test_a_queue_removed_from_the_bucket_is_caught_against_the_floor(
        rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    fold(rec, remote, tmp_path / "floor")
    for page in remote.client.get_paginator("list_objects_v2").paginate(
            Bucket=remote.bucket, Prefix=f"{remote.prefix}{rec.queue}/"):
        for obj in page.get("Contents", []):
            remote.client.delete_object(Bucket=remote.bucket, Key=obj["Key"])
    alone = verify(remote, progress=False)  # the bucket alone cannot know (SeaweedFS may
    assert all(r.entries == 0 for r in alone.values())  # still list the empty folder)
    with pytest.raises(MissingSlice, match="newest history was removed"):
        verify(remote, progress=False, floor=tmp_path / "floor")


def test_a_reordered_middle_is_refused(rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    """Two middle slices exchange their entries' fields (ids kept, every header and
    checksum consistent): the history reads in another order."""
    fold(rec, remote, tmp_path / "floor", 40)
    refs = remote.list_slices(rec.queue)
    one, two = raw_body(remote, refs[1]), raw_body(remote, refs[2])
    swapped = []
    for mine, theirs in ((one, two), (two, one)):
        lines = [mine[0]]
        for a, b in zip(mine[1:-1], theirs[1:-1], strict=True):
            entry, other = json.loads(a), json.loads(b)
            entry["fields"] = other["fields"]
            lines.append(json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode())
        swapped.append(b"\n".join(lines + [b""]))
    put_raw(remote, refs[1], swapped[0])
    put_raw(remote, refs[2], swapped[1])
    with pytest.raises(ChecksumMismatch, match=remote.address(refs[1].name)):
        verify(remote, progress=False)
    with pytest.raises(ChecksumMismatch, match=remote.address(refs[1].name)):
        restore(remote, tmp_path / "new", progress=False)


def test_a_missing_middle_slice_is_refused_with_or_without_the_manifest(
        rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    fold(rec, remote, tmp_path / "floor", 40)
    refs = remote.list_slices(rec.queue)
    remote.client.delete_object(Bucket=remote.bucket, Key=remote.prefix + refs[1].name)
    with pytest.raises(MissingSlice, match=remote.address(refs[1].name)):
        verify(remote, progress=False)
    remote.client.delete_object(Bucket=remote.bucket,
                                Key=f"{remote.prefix}{rec.queue}/manifest.json")
    with pytest.raises(MissingSlice, match=refs[2].name):
        restore(remote, tmp_path / "new", progress=False, rebuild_manifest=True)


def test_a_consistent_rewrite_is_caught_against_the_floor_and_a_kept_digest(
        rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    """The forger rewrites every slice and the manifest consistently (it runs our own code
    over forged entries): only what is kept outside the bucket can tell."""
    from echomq.archive.manifest import next_manifest
    from echomq.archive.slices import build_slice

    fold(rec, remote, tmp_path / "floor")
    kept = verify(remote, progress=False)[rec.queue].head_digest
    manifest, digest = None, ""
    for ref in remote.list_slices(rec.queue):
        items = []
        for sid, fields, _ in remote.get_slice(ref).items:
            forged = dict(fields, result="FORGED")
            line = json.dumps({"id": sid, "fields": forged}, ensure_ascii=False,
                              separators=(",", ":")).encode()
            items.append((sid, forged, line))
        content = build_slice(rec.queue, ref.prev, items, prev_digest=digest)
        remote.client.put_object(Bucket=remote.bucket, Key=remote.prefix + ref.name,
                                 Body=content.data, Metadata={"sha256": content.meta.sha256})
        manifest, digest = next_manifest(manifest, content.meta), content.meta.digest
    assert manifest is not None
    remote.client.put_object(Bucket=remote.bucket, Key=f"{remote.prefix}{rec.queue}/manifest.json",
                             Body=manifest.to_bytes())
    assert verify(remote, progress=False)[rec.queue].head_digest == digest  # the bucket alone
    first = remote.address(remote.list_slices(rec.queue)[0].name)
    with pytest.raises(ChecksumMismatch, match=first):
        verify(remote, progress=False, floor=tmp_path / "floor")
    with pytest.raises(ChecksumMismatch, match=kept):
        verify(remote, progress=False, pins={rec.queue: kept})
    rec.add(5)  # the driver that uploaded the real history will not extend the forged one
    with pytest.raises(RemoteConflict, match="history differs"):
        Driver(rec.conn, tmp_path / "floor", remote, slice_count=10).fold(rec.queue)
    assert rec.conn.redis.xlen(rec.key) == 5


def test_the_healthy_chain(rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    driver = Driver(rec.conn, tmp_path / "floor", remote, slice_count=10)
    for n in (15, 10, 7):  # several folds: each appends to the same chain
        rec.add(n)
        driver.fold(rec.queue)
    written = rec.written_ids()
    refs = remote.list_slices(rec.queue)
    contents = [remote.get_slice(ref) for ref in refs]
    digests = [c.meta.digest for c in contents]
    assert [c.meta.prev_digest for c in contents] == [""] + digests[:-1]
    manifest = remote.read_manifest(rec.queue)
    assert manifest is not None and [link[2] for link in manifest.chain] == digests
    assert [m.digest for m in driver.floor.uploaded_slices(rec.queue)] == digests
    report = verify(remote, progress=False, floor=driver.floor,
                    pins={rec.queue: digests[1]})[rec.queue]
    assert (report.slices, report.entries, report.head_digest) == (len(refs), 32, digests[-1])
    restored = restore(remote, tmp_path / "new", progress=False)[rec.queue]
    assert (restored.entries, restored.head_digest, restored.rebuilt) == (32, digests[-1], False)
    with Floor(tmp_path / "new") as floor:
        assert floor_ids(floor, rec.queue) == written
        assert [m.digest for m in floor.uploaded_slices(rec.queue)] == digests
    rec.add(3)  # a second machine, restored from the bucket, extends the same chain
    other = Driver(rec.conn, tmp_path / "new", remote, slice_count=10)
    assert other.fold(rec.queue).uploaded == 1
    verify(remote, progress=False, floor=tmp_path / "new")
    other.close()
    driver.close()


def test_a_floor_only_backlog_is_chained_when_it_is_uploaded(
        rec: Recorder, weed_remote: S3Remote, tmp_path: Path) -> None:
    rec.add(30)
    with Floor(tmp_path / "floor") as floor:
        Driver(rec.conn, floor, slice_count=10).fold(rec.queue)
        rec.add(10)
        Driver(rec.conn, floor, weed_remote, slice_count=10).fold(rec.queue)
        report = verify(weed_remote, progress=False, floor=floor)[rec.queue]
        assert (report.slices, report.entries) == (4, 40)
        assert [m.digest for m in floor.uploaded_slices(rec.queue)] == [
            link[2] for link in weed_remote.read_manifest(rec.queue).chain]  # type: ignore[union-attr]


def test_older_formats_fail_clearly(rec: Recorder, remote: S3Remote, tmp_path: Path) -> None:
    fold(rec, remote, tmp_path / "floor", 10)
    ref = remote.list_slices(rec.queue)[0]
    lines = raw_body(remote, ref)
    head = json.loads(lines[0])
    head["format"] = "emq-slice/1"
    del head["prev_digest"]
    put_raw(remote, ref, b"\n".join([json.dumps(head).encode()] + lines[1:]))
    with pytest.raises(ChecksumMismatch, match="predates chained slices"):
        verify(remote, progress=False)
    key = f"{remote.prefix}{rec.queue}/manifest.json"
    remote.client.put_object(Bucket=remote.bucket, Key=key, Body=json.dumps(
        {"format": "emq-manifest/1", "queue": rec.queue, "head": ref.last, "slices": 1,
         "entries": 10}).encode())
    with pytest.raises(Exception, match="older manifests predate chained slices") as info:
        verify(remote, progress=False)
    assert type(info.value).__name__ == "ManifestCorrupt"


def test_the_command_line_refuses_a_cut_bucket_unless_asked(
        rec: Recorder, seaweed: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from echomq.cli.archive import archive_cli

    remote = remote_on(seaweed, bucket_name(), "")
    fold(rec, remote, tmp_path / "floor")
    for name, value in {"EMQ_S3_BUCKET": remote.bucket, "EMQ_S3_ENDPOINT_URL":
                        seaweed.endpoint_url, "EMQ_S3_REGION": "us-east-1",
                        "AWS_ACCESS_KEY_ID": seaweed.access_key,
                        "AWS_SECRET_ACCESS_KEY": seaweed.secret_key}.items():
        monkeypatch.setenv(name, value)

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(archive_cli, list(args))
        return result.exit_code, result.output

    code, out = run("verify", "--json", "--floor", str(tmp_path / "floor"))
    head_digest = json.loads(out)["head_digest"]
    assert code == 0 and json.loads(out)["slices"] == 3
    code, out = run("verify", "--json", "--pin", f"{rec.queue}={head_digest}")
    assert code == 0
    code, out = run("verify", "--json", "--pin", f"{rec.queue}={'0' * 64}")
    assert code == 1 and "ChainBroken" in out
    code, out = run("verify", "--json", "--floor", str(tmp_path / "floor"), "--queue",
                    rec.queue)  # the floor that uploaded the history: still the same
    assert code == 0
    remote.client.delete_object(Bucket=remote.bucket, Key=f"{rec.queue}/manifest.json")
    code, out = run("restore", "--floor", str(tmp_path / "new"), "--json")
    assert code == 1 and "ManifestMissing" in out and "--rebuild-manifest" in out
    code, out = run("restore", "--floor", str(tmp_path / "new"), "--json",
                    "--rebuild-manifest")
    report = json.loads(out)
    assert code == 0 and (report["entries"], report["rebuilt"]) == (30, True)
    assert report["head_digest"] == head_digest
