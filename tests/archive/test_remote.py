"""The remote's contract, held by every implementation against a real server.

``TestRemoteContract`` runs once on SeaweedFS and once on moto (the ``remote`` fixture);
a new remote implementation gets the same class.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from echomq.archive import ManifestConflict, RemoteRefused, S3Remote, UploadUnconfirmed
from echomq.archive.entries import entry_line
from echomq.archive.manifest import next_manifest
from echomq.archive.slices import SliceContent, build_slice
from echomq.errors import ChecksumMismatch, InvalidArgument, RemoteUnavailable
from echomq.servers.process import free_port
from echomq.servers.seaweed import SeaweedS3
from tests.support.archive import bucket_name


def slice_of(queue: str, prev: str, start: int, n: int, tag: str = "", prev_digest: str = ""
             ) -> SliceContent:
    items = []
    for i in range(start, start + n):
        fields = {"job": f"j{i}", "outcome": "completed", "result": f"r{i}{tag}",
                  "attempts": "1", "at": str(i)}
        items.append((f"{i}-0", fields, entry_line(f"{i}-0", fields)))
    return build_slice(queue, prev, items, prev_digest=prev_digest)


class TestRemoteContract:
    def test_put_is_create_only_and_recognises_its_own_object(self, remote: S3Remote) -> None:
        content = slice_of("q", "0-0", 1, 10)
        assert remote.put_slice(content) is True
        assert remote.put_slice(content) is False  # a retry: same name, same checksum
        assert remote.has_slice(content) is True
        assert remote.has_slice(slice_of("q", "10-0", 11, 3)) is False

    def test_other_bytes_under_the_same_name_are_refused_by_name(self, remote: S3Remote) -> None:
        remote.put_slice(slice_of("q", "0-0", 1, 10))
        impostor = slice_of("q", "0-0", 1, 10, tag="x")
        with pytest.raises(ChecksumMismatch, match=remote.address(impostor.meta.name)):
            remote.put_slice(impostor)
        assert remote.get_slice(impostor.meta.ref).data == slice_of("q", "0-0", 1, 10).data

    def test_get_verifies_and_round_trips(self, remote: S3Remote) -> None:
        content = slice_of("q", "0-0", 1, 25)
        remote.put_slice(content)
        back = remote.get_slice(content.meta.ref)
        assert back.meta == content.meta
        assert [i[2] for i in back.items] == [i[2] for i in content.items]

    def test_a_corrupted_object_is_refused_by_name(self, remote: S3Remote) -> None:
        content = slice_of("q", "0-0", 1, 5)
        remote.put_slice(content)
        key = remote.prefix + content.meta.name
        other = slice_of("q", "0-0", 1, 5, tag="evil")  # valid gzip, wrong bytes
        remote.client.put_object(Bucket=remote.bucket, Key=key, Body=other.data,
                                 Metadata={"sha256": content.meta.sha256})
        with pytest.raises(ChecksumMismatch, match=remote.address(content.meta.name)):
            remote.get_slice(content.meta.ref)
        remote.client.put_object(Bucket=remote.bucket, Key=key, Body=b"garbage")
        with pytest.raises(ChecksumMismatch, match=remote.address(content.meta.name)):
            remote.get_slice(content.meta.ref)

    def test_listing_is_in_history_order(self, remote: S3Remote) -> None:
        prev, made = "0-0", []
        for start in (1, 11, 101, 1001):  # lexicographically unsorted if not zero-padded
            content = slice_of("q", prev, start, 5)
            made.append(content.meta.ref)
            prev = content.meta.last
        for content_ref in reversed(made):
            start = int(content_ref.first.split("-")[0])
            remote.put_slice(slice_of("q", content_ref.prev, start, 5))
        remote.put_slice(slice_of("other", "0-0", 1, 5))
        remote.client.put_object(Bucket=remote.bucket, Key=remote.prefix + "q/slices/README",
                                 Body=b"not a slice")
        assert remote.list_slices("q") == made
        assert remote.queues() == ["other", "q"]

    def test_listing_pages_through_many_objects(self, remote: S3Remote) -> None:
        remote.page_size = 7
        prev, made = "0-0", []
        for i in range(1, 31):
            content = slice_of("q", prev, i, 1)
            remote.put_slice(content)
            made.append(content.meta.ref)
            prev = content.meta.last
        assert remote.list_slices("q") == made

    def test_the_manifest_only_moves_forward(self, remote: S3Remote) -> None:
        a = slice_of("q", "0-0", 1, 10)
        b = slice_of("q", a.meta.last, 11, 10, prev_digest=a.meta.digest)
        c = slice_of("q", b.meta.last, 21, 10, prev_digest=b.meta.digest)
        one, two = next_manifest(None, a.meta), next_manifest(None, a.meta).extended(b.meta)
        assert remote.read_manifest("q") is None
        first = remote.write_manifest(one, None)
        assert first.etag
        with pytest.raises(ManifestConflict):  # someone created it already
            remote.write_manifest(two, None)
        stored = remote.read_manifest("q")
        assert stored is not None and stored.head == a.meta.last and stored.chain == one.chain
        second = remote.write_manifest(two, stored)
        with pytest.raises(ManifestConflict):  # a stale ETag: it moved under us
            remote.write_manifest(two.extended(c.meta), stored)
        with pytest.raises(ManifestConflict, match="only moves forward"):
            remote.write_manifest(one, second)
        after = remote.read_manifest("q")
        assert after is not None and after.head == "20-0" and after.slices == 2
        assert after.head_digest == b.meta.digest
        assert [link[2] for link in after.chain] == [a.meta.digest, b.meta.digest]

    def test_confirm_sees_what_is_stored(self, remote: S3Remote) -> None:
        content = slice_of("q", "0-0", 1, 10)
        with pytest.raises(UploadUnconfirmed, match="does not have the object"):
            remote.confirm_slice(content.meta)
        remote.put_slice(content)
        remote.confirm_slice(content.meta)
        remote.client.put_object(Bucket=remote.bucket, Key=remote.prefix + content.meta.name,
                                 Body=content.data[:-1],
                                 Metadata={"sha256": content.meta.sha256})
        with pytest.raises(UploadUnconfirmed, match=f"{content.meta.size} bytes"):
            remote.confirm_slice(content.meta)
        manifest = remote.write_manifest(next_manifest(None, content.meta), None)
        remote.confirm_manifest(manifest)
        with pytest.raises(UploadUnconfirmed):  # another manifest than the one stored
            remote.confirm_manifest(manifest.extended(slice_of(
                "q", "10-0", 11, 1, prev_digest=content.meta.digest).meta))

    def test_an_unreachable_store_is_unavailable_after_retries(self, remote: S3Remote) -> None:
        dead = S3Remote(remote.bucket, endpoint_url=f"http://127.0.0.1:{free_port()}",
                        region="us-east-1", aws_access_key_id="a", aws_secret_access_key="b",
                        retries=2, backoff_s=0.01, timeout_s=1)
        with pytest.raises(RemoteUnavailable, match="3 attempts"):
            dead.put_slice(slice_of("q", "0-0", 1, 1))
        with pytest.raises(RemoteUnavailable):
            dead.read_manifest("q")


class TestSeaweedCredentials:
    def test_a_wrong_secret_is_refused(self, seaweed: SeaweedS3, weed_remote: S3Remote) -> None:
        wrong = S3Remote(weed_remote.bucket, endpoint_url=seaweed.endpoint_url,
                         region="us-east-1", aws_access_key_id=seaweed.access_key,
                         aws_secret_access_key="not-the-secret", retries=0)
        with pytest.raises(RemoteRefused):
            wrong.list_slices("q")
        with pytest.raises(RemoteRefused):
            wrong.put_slice(slice_of("q", "0-0", 1, 1))

    def test_an_unsigned_request_is_refused(self, seaweed: SeaweedS3,
                                            weed_remote: S3Remote) -> None:
        content = slice_of("q", "0-0", 1, 1)
        weed_remote.put_slice(content)
        url = f"{seaweed.endpoint_url}/{weed_remote.bucket}/{weed_remote.prefix}{content.meta.name}"
        request = urllib.request.Request(url.replace(".jsonl.gz", ".x"), data=b"x", method="PUT")
        for attempt in (url, request):
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(attempt, timeout=5).close()
            info.value.close()
            assert info.value.code == 403


class TestRemoteFromEndpoint:
    """A launcher hands out plain values (URL, keys, region, bucket); the archive builds
    its remote on them, so no launcher imports the archive."""

    def test_a_remote_built_on_a_launchers_endpoint_stores(self, seaweed: SeaweedS3) -> None:
        endpoint = seaweed.endpoint(bucket_name())
        assert (endpoint.url, endpoint.access_key, endpoint.region) == (
            seaweed.endpoint_url, seaweed.access_key, "us-east-1")
        assert seaweed.secret_key not in repr(endpoint)
        remote = S3Remote.from_endpoint(endpoint, "archive/", create_bucket=True)
        assert (remote.bucket, remote.prefix) == (endpoint.bucket, "archive/")
        content = slice_of("q", "0-0", 1, 3)
        assert remote.put_slice(content) is True
        other = S3Remote.from_endpoint(seaweed.endpoint(), "archive/", bucket=remote.bucket)
        assert other.has_slice(content) is True  # the bucket named by the caller

    def test_an_endpoint_without_a_bucket_needs_one(self, seaweed: SeaweedS3) -> None:
        with pytest.raises(InvalidArgument, match="no bucket"):
            S3Remote.from_endpoint(seaweed.endpoint())
