"""The manifests of a remote on S3: one object per queue, moved by compare-and-swap on its
ETag.

The manifest only ever moves forward (``write``), or is rewritten at the same head by a
prune or a compaction (``rewrite``), so a driver with a fresh, empty floor cannot publish
a manifest that hides older history.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace

import botocore.exceptions as bex

from echomq.archive.manifest import Manifest
from echomq.archive.s3_bucket import S3Bucket, status_of
from echomq.archive.stream_ids import id_lt
from echomq.errors import ManifestConflict


class S3Manifests:
    """Every manifest request of one remote, over its :class:`S3Bucket`."""

    def __init__(self, bucket: S3Bucket) -> None:
        self.s3 = bucket

    def key(self, queue: str) -> str:
        """The manifest's key: beside the queue's ``slices/``, under the prefix."""
        return f"{self.s3.prefix}{queue}/manifest.json"

    def read(self, queue: str) -> Manifest | None:
        """The queue's manifest, or None before the first upload."""
        s3, key = self.s3, self.key(queue)
        try:
            response = s3.call(f"get s3://{s3.bucket}/{key}", s3.client.get_object,
                               Bucket=s3.bucket, Key=key)
        except bex.ClientError as exc:
            if status_of(exc) == 404:
                return None
            raise s3.refused(f"get s3://{s3.bucket}/{key}", exc) from exc
        return Manifest.from_bytes(response["Body"].read(), response.get("ETag"),
                                   f"s3://{s3.bucket}/{key}")

    def confirm(self, manifest: Manifest) -> None:
        """The stored manifest is ``manifest`` (size and sha256), or UploadUnconfirmed."""
        body = manifest.to_bytes()
        self.s3.confirm(self.key(manifest.queue), len(body), hashlib.sha256(body).hexdigest())

    def write(self, new: Manifest, expected: Manifest | None) -> Manifest:
        """Replace ``expected`` (None: create) by ``new``, forward only, atomically."""
        if expected is not None and not id_lt(expected.head, new.head):
            raise ManifestConflict(
                f"refusing to move the manifest of {new.queue!r} from {expected.head} "
                f"to {new.head}: it only moves forward"
            )
        return self._put(new, expected)

    def rewrite(self, new: Manifest, expected: Manifest) -> Manifest:
        """Replace ``expected`` by ``new`` at the same head, atomically."""
        if (new.queue, new.head) != (expected.queue, expected.head):
            raise ManifestConflict(
                f"refusing to rewrite the manifest of {expected.queue!r} at {expected.head} "
                f"into one at {new.head}: a rewrite keeps the head"
            )
        return self._put(new, expected)

    def _put(self, new: Manifest, expected: Manifest | None) -> Manifest:
        """Put ``new`` only if the stored manifest is still ``expected`` (its ETag)."""
        s3, key = self.s3, self.key(new.queue)
        condition: dict[str, str] = (
            {"IfNoneMatch": "*"} if expected is None else {"IfMatch": expected.etag or "*"}
        )
        new = replace(new, updated_at=int(time.time() * 1000))
        body = new.to_bytes()
        try:
            response = s3.call(
                f"put s3://{s3.bucket}/{key}", s3.client.put_object, Bucket=s3.bucket,
                Key=key, Body=body, ContentType="application/json",
                Metadata={"sha256": hashlib.sha256(body).hexdigest(), "head": new.head},
                **condition,
            )
        except bex.ClientError as exc:
            if status_of(exc) in (409, 412):
                raise ManifestConflict(
                    f"the manifest s3://{s3.bucket}/{key} changed under us"
                ) from exc
            raise s3.refused(f"put s3://{s3.bucket}/{key}", exc) from exc
        return replace(new, etag=response.get("ETag"))
