"""The slice objects of a remote on S3: written create-only, read verified, listed,
counted and deleted.

A slice is put with ``If-None-Match: *``: an object, once there, is never replaced, so a
retried or duplicated upload is recognised by its stored checksum (or, compressed by
another zlib, by its digest) instead of overwriting history.
"""

from __future__ import annotations

import botocore.exceptions as bex

from echomq.archive.s3_bucket import S3Bucket, status_of
from echomq.archive.slices import (
    SliceContent,
    SliceMeta,
    SliceRef,
    decode_slice,
    parse_slice_name,
)
from echomq.errors import ChecksumMismatch, MissingSlice, RemoteRefused


class S3Slices:
    """Every slice request of one remote, over its :class:`S3Bucket`."""

    def __init__(self, bucket: S3Bucket) -> None:
        self.s3 = bucket

    def put(self, content: SliceContent) -> bool:
        """True: written now; False: already there, the same slice; else it raises."""
        s3, meta = self.s3, content.meta
        try:
            s3.call(
                f"put {s3.address(meta.name)}", s3.client.put_object,
                Bucket=s3.bucket, Key=s3.prefix + meta.name, Body=content.data,
                IfNoneMatch="*", ContentType="application/gzip",
                Metadata={"sha256": meta.sha256, "count": str(meta.count), "prev": meta.prev,
                          "digest": meta.digest},
            )
            return True
        except bex.ClientError as exc:
            if status_of(exc) not in (409, 412):
                raise s3.refused(f"put {s3.address(meta.name)}", exc) from exc
        if self.stored_matches(content):  # ours from an earlier try
            return False
        raise ChecksumMismatch(f"{s3.address(meta.name)} vanished after a refused put")

    def stored_matches(self, content: SliceContent) -> bool:
        """True: the stored object is this slice; False: none stored; else it raises."""
        s3, meta = self.s3, content.meta
        try:
            head = s3.call(f"head {s3.address(meta.name)}", s3.client.head_object,
                           Bucket=s3.bucket, Key=s3.prefix + meta.name)
        except bex.ClientError as exc:
            if status_of(exc) == 404:
                return False
            raise s3.refused(f"head {s3.address(meta.name)}", exc) from exc
        stored = head.get("Metadata", {}).get("sha256")
        if stored == meta.sha256:
            return True
        existing = bytes(s3.get(meta.name)["Body"].read())
        try:
            other = decode_slice(existing, meta.ref, s3.address(meta.name))
        except ChecksumMismatch:
            other = None
        if other is not None and other.meta.digest == meta.digest:
            return True  # the same header and entries, compressed by another zlib
        raise ChecksumMismatch(
            f"{s3.address(meta.name)} already exists with other content "
            f"(sha256 {stored}, ours {meta.sha256})"
        )

    def confirm(self, meta: SliceMeta) -> None:
        """One HEAD: the object has ``meta``'s size and sha256, or UploadUnconfirmed."""
        self.s3.confirm(self.s3.prefix + meta.name, meta.size, meta.sha256)

    def get(self, ref: SliceRef) -> SliceContent:
        """Read a slice, verified against its stored checksum and its name."""
        where = self.s3.address(ref.name)
        response = self.s3.get(ref.name)
        data = bytes(response["Body"].read())
        content = decode_slice(data, ref, where)
        stored = response.get("Metadata", {}).get("sha256")
        if stored != content.meta.sha256:
            raise ChecksumMismatch(
                f"{where}: checksum mismatch (stored {stored}, computed {content.meta.sha256})"
            )
        return content

    def of_queue(self, queue: str) -> list[SliceRef]:
        """Every slice object of ``queue``, in history order (a stray object is none)."""
        prefix = self.s3.prefix
        refs = []
        for page in self.s3.pages(f"{prefix}{queue}/slices/"):
            for obj in page.get("Contents", []):
                try:
                    ref = parse_slice_name(obj["Key"][len(prefix):])
                except ValueError:
                    continue  # not ours: a stray object is no slice
                if ref.queue == queue:
                    refs.append(ref)
        return sorted(refs, key=SliceRef.sort_key)

    def delete(self, ref: SliceRef) -> None:
        """Delete one object (absent is fine)."""
        s3 = self.s3
        try:
            s3.call(f"delete {s3.address(ref.name)}", s3.client.delete_object,
                    Bucket=s3.bucket, Key=s3.prefix + ref.name)
        except bex.ClientError as exc:
            if status_of(exc) != 404:
                raise s3.refused(f"delete {s3.address(ref.name)}", exc) from exc

    def delete_many(self, refs: list[SliceRef]) -> None:
        """Delete objects a thousand per request (S3's DeleteObjects takes up to 1,000)."""
        s3 = self.s3
        for start in range(0, len(refs), 1000):
            chunk = refs[start:start + 1000]
            what = f"delete {len(chunk)} objects under {s3.address(chunk[0].queue + '/')}"
            try:
                reply = s3.call(what, s3.client.delete_objects, Bucket=s3.bucket,
                                Delete={"Objects": [{"Key": s3.prefix + r.name}
                                                    for r in chunk], "Quiet": True})
            except bex.ClientError as exc:
                raise s3.refused(what, exc) from exc
            failed = [e for e in reply.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if failed:
                raise RemoteRefused(f"{what} refused by {s3.label}: {failed[0].get('Key')}: "
                                    f"{failed[0].get('Code')} {failed[0].get('Message')}")

    def count(self, ref: SliceRef) -> int:
        """How many entries a stored slice holds, from its metadata (one HEAD)."""
        head = self.s3.head(self.s3.prefix + ref.name)
        if head is None:
            raise MissingSlice(f"{self.s3.address(ref.name)} is missing")
        try:
            return int(head.get("Metadata", {})["count"])
        except (KeyError, ValueError) as exc:
            raise ChecksumMismatch(f"{self.s3.address(ref.name)}: no entry count in its "
                                   "metadata") from exc

    def sizes(self, queue: str) -> dict[str, int]:
        """The stored size in bytes of every slice object of ``queue``, by name."""
        prefix = self.s3.prefix
        sizes = {}
        for page in self.s3.pages(f"{prefix}{queue}/slices/"):
            for obj in page.get("Contents", []):
                sizes[obj["Key"][len(prefix):]] = int(obj.get("Size", 0))
        return sizes
