"""The remote: S3-compatible object storage holding every slice and one manifest per queue.

Slices are written create-only (``If-None-Match: *``): an object, once there, is never
replaced, so a retried or duplicated upload is recognised by its stored checksum instead
of overwriting history. The manifest records how far the contiguous chain of slices
reaches, and every slice's digest on the way; it only ever moves forward, by
compare-and-swap on its ETag, so a driver with a fresh, empty floor cannot publish a
manifest that hides older history.

A store can answer 200 and keep nothing (a broken proxy, a misconfigured gateway), so an
upload is not trusted until ``confirm_slice`` / ``confirm_manifest`` see it stored with the
expected size and sha256: nothing is trimmed before that.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol, TypeVar

import boto3
import botocore.exceptions as bex
from botocore.config import Config

from echomq.archive.manifest import Manifest
from echomq.archive.slices import (
    SliceContent,
    SliceMeta,
    SliceRef,
    decode_slice,
    parse_slice_name,
)
from echomq.archive.stream_ids import id_lt
from echomq.errors import (
    ChecksumMismatch,
    InvalidArgument,
    ManifestConflict,
    MissingSlice,
    RemoteRefused,
    RemoteUnavailable,
    UploadUnconfirmed,
)

T = TypeVar("T")
_session_lock = threading.Lock()
_session: boto3.session.Session | None = None
_RETRY_CODES = {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout",
                "Throttling", "ThrottlingException", "RequestTimeTooSkewed"}


class Remote(Protocol):
    """What the driver and restore need from an object store (one contract, see tests)."""

    def put_slice(self, content: SliceContent) -> bool:
        """Store a slice create-only. True: written now; False: already there, same bytes.
        A different object under the same name raises :class:`ChecksumMismatch`."""

    def has_slice(self, content: SliceContent) -> bool:
        """Whether this very slice is stored (False when absent; a different object under
        its name raises :class:`ChecksumMismatch`)."""

    def confirm_slice(self, meta: SliceMeta) -> None:
        """Raise :class:`UploadUnconfirmed` unless the stored object has ``meta``'s size
        and sha256 (one HEAD)."""

    def confirm_manifest(self, manifest: Manifest) -> None:
        """Raise :class:`UploadUnconfirmed` unless the stored manifest is ``manifest``."""

    def get_slice(self, ref: SliceRef) -> SliceContent:
        """Read a slice, verified against its stored checksum and its name."""

    def list_slices(self, queue: str) -> list[SliceRef]:
        """Every slice object of ``queue``, in history order."""

    def read_manifest(self, queue: str) -> Manifest | None:
        """The queue's manifest, or None before the first upload."""

    def write_manifest(self, new: Manifest, expected: Manifest | None) -> Manifest:
        """Replace ``expected`` (None: create) by ``new``, forward only, atomically."""

    def rewrite_manifest(self, new: Manifest, expected: Manifest) -> Manifest:
        """Replace ``expected`` by ``new`` at the same head, atomically (a prune or a
        compaction: the chain's start or its objects change, never its head)."""

    def delete_slice(self, ref: SliceRef) -> None:
        """Delete a slice object no manifest points at any more (absent is fine)."""

    def delete_slices(self, refs: list[SliceRef]) -> None:
        """Delete many such objects, in as few requests as the store allows."""

    def slice_count(self, ref: SliceRef) -> int:
        """How many entries a stored slice holds, from its metadata (one HEAD)."""

    def slice_sizes(self, queue: str) -> dict[str, int]:
        """The stored size in bytes of every slice object of ``queue``, by name."""

    def queues(self) -> list[str]:
        """Every queue with objects in this remote."""

    def address(self, name: str) -> str:
        """A human address of an object, for error messages."""

    def record_address(self) -> str:
        """How a declaration names this store as an archive of record."""


class Endpoint(Protocol):
    """An S3 endpoint as plain values (``echomq.servers``' launchers hand one out):
    what :meth:`S3Remote.from_endpoint` reads, without the archive knowing who made it."""

    @property
    def url(self) -> str: ...
    @property
    def access_key(self) -> str: ...
    @property
    def secret_key(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def bucket(self) -> str: ...


class S3Remote:
    """A :class:`Remote` on any S3-compatible store, through boto3.

    Without keys boto3's standard credentials chain applies (env, profile, instance role).
    ``endpoint_url`` selects a non-AWS store (SeaweedFS, moto, Tigris). Requests that fail
    with connection errors, 429 or 5xx are retried ``retries`` times with exponential
    backoff, then raise :class:`RemoteUnavailable`.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        request_checksum_calculation: str = "when_required",
        create_bucket: bool = False,
        retries: int = 5,
        backoff_s: float = 0.2,
        timeout_s: float = 10.0,
        addressing_style: str | None = None,
        page_size: int = 1000,
    ) -> None:
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self.retries = retries
        self.backoff_s = backoff_s
        self.page_size = page_size
        s3_options = {"addressing_style": addressing_style} if addressing_style else None
        config = Config(
            request_checksum_calculation=request_checksum_calculation,
            response_checksum_validation="when_required",
            retries={"total_max_attempts": 1},  # our own bounded loop below
            connect_timeout=min(timeout_s, 5.0),
            read_timeout=timeout_s,
            s3=s3_options,
        )
        global _session
        with _session_lock:  # one session: its loaded service models make clients cheap
            if _session is None:
                _session = boto3.session.Session()
            self.client: Any = _session.client(
                "s3", endpoint_url=endpoint_url, region_name=region,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key, config=config,
            )
        if create_bucket:
            self.ensure_bucket()

    @classmethod
    def from_endpoint(cls, endpoint: Endpoint, prefix: str = "", *, bucket: str = "",
                      **options: Any) -> S3Remote:
        """A remote on ``endpoint`` with its keys and region, in ``bucket`` (default the
        endpoint's own); ``options`` as the constructor takes them (``create_bucket``,
        ``retries``...)."""
        name = bucket or endpoint.bucket
        if not name:
            raise InvalidArgument(f"no bucket: the endpoint at {endpoint.url} names none "
                                  "and none was given")
        return cls(name, prefix, endpoint_url=endpoint.url, region=endpoint.region,
                   aws_access_key_id=endpoint.access_key,
                   aws_secret_access_key=endpoint.secret_key, **options)

    def __repr__(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"S3Remote(s3://{self.bucket}/{self.prefix}{where})"

    # -- plumbing -------------------------------------------------------------------------

    def address(self, name: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{name}"

    def record_address(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return self.address("") + where

    def _call(self, what: str, fn: Callable[..., T], **kwargs: Any) -> T:
        """One request with bounded retries; a ClientError that is not transient passes."""
        for attempt in range(self.retries + 1):
            try:
                return fn(**kwargs)
            except bex.ClientError as exc:
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                code = exc.response.get("Error", {}).get("Code", "")
                if not (status == 429 or status >= 500 or code in _RETRY_CODES):
                    raise
                last: Exception = exc
            except (bex.HTTPClientError, bex.ConnectionError) as exc:
                last = exc
            if attempt < self.retries:
                delay = min(self.backoff_s * 2**attempt, 5.0)
                time.sleep(delay * (0.5 + random.random() / 2))
        raise RemoteUnavailable(
            f"{what} failed after {self.retries + 1} attempts ({self!r}): {last}"
        ) from last

    @staticmethod
    def _status(exc: bex.ClientError) -> int:
        return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))

    def _refused(self, what: str, exc: bex.ClientError) -> RemoteRefused:
        err = exc.response.get("Error", {})
        return RemoteRefused(f"{what} refused by {self!r}: {err.get('Code')} {err.get('Message')}")

    def ensure_bucket(self) -> None:
        try:
            self._call("head bucket", self.client.head_bucket, Bucket=self.bucket)
            return
        except bex.ClientError as exc:
            if self._status(exc) != 404:
                raise self._refused(f"head bucket {self.bucket}", exc) from exc
        region = self.client.meta.region_name
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if region and region not in ("us-east-1", "auto"):
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self._call("create bucket", self.client.create_bucket, **kwargs)
        except bex.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in (
                "BucketAlreadyOwnedByYou", "BucketAlreadyExists"
            ):
                raise self._refused(f"create bucket {self.bucket}", exc) from exc

    # -- slices ---------------------------------------------------------------------------

    def put_slice(self, content: SliceContent) -> bool:
        meta = content.meta
        key = self.prefix + meta.name
        try:
            self._call(
                f"put {self.address(meta.name)}", self.client.put_object,
                Bucket=self.bucket, Key=key, Body=content.data, IfNoneMatch="*",
                ContentType="application/gzip",
                Metadata={"sha256": meta.sha256, "count": str(meta.count), "prev": meta.prev,
                          "digest": meta.digest},
            )
            return True
        except bex.ClientError as exc:
            if self._status(exc) not in (409, 412):
                raise self._refused(f"put {self.address(meta.name)}", exc) from exc
        if self._stored_matches(content):  # ours from an earlier try
            return False
        raise ChecksumMismatch(f"{self.address(meta.name)} vanished after a refused put")

    def has_slice(self, content: SliceContent) -> bool:
        return self._stored_matches(content)

    def _stored_matches(self, content: SliceContent) -> bool:
        """True: the stored object is this slice; False: none stored; else it raises."""
        meta = content.meta
        try:
            head = self._call(f"head {self.address(meta.name)}", self.client.head_object,
                              Bucket=self.bucket, Key=self.prefix + meta.name)
        except bex.ClientError as exc:
            if self._status(exc) == 404:
                return False
            raise self._refused(f"head {self.address(meta.name)}", exc) from exc
        stored = head.get("Metadata", {}).get("sha256")
        if stored == meta.sha256:
            return True
        existing = self._get_bytes(meta.name)
        try:
            other = decode_slice(existing, meta.ref, self.address(meta.name))
        except ChecksumMismatch:
            other = None
        if other is not None and other.meta.digest == meta.digest:
            return True  # the same header and entries, compressed by another zlib
        raise ChecksumMismatch(
            f"{self.address(meta.name)} already exists with other content "
            f"(sha256 {stored}, ours {meta.sha256})"
        )

    def _head(self, key: str) -> dict[str, Any] | None:
        """The object's HEAD reply, or None when it is absent."""
        address = f"s3://{self.bucket}/{key}"
        try:
            return dict(self._call(f"head {address}", self.client.head_object,
                                   Bucket=self.bucket, Key=key))
        except bex.ClientError as exc:
            if self._status(exc) == 404:
                return None
            raise self._refused(f"head {address}", exc) from exc

    def _confirm(self, key: str, size: int, sha256: str) -> None:
        """The object at ``key`` is stored with this size and sha256 metadata, or raise."""
        head = self._head(key)
        address = f"s3://{self.bucket}/{key}"
        if head is None:
            raise UploadUnconfirmed(f"{address}: the store accepted the upload but does not "
                                    f"have the object ({self!r}); nothing is trimmed")
        stored = (int(head.get("ContentLength", -1)), head.get("Metadata", {}).get("sha256"))
        if stored != (size, sha256):
            raise UploadUnconfirmed(
                f"{address}: stored as {stored[0]} bytes with sha256 {stored[1]}, but "
                f"{size} bytes with sha256 {sha256} were sent ({self!r}); nothing is trimmed")

    def confirm_slice(self, meta: SliceMeta) -> None:
        self._confirm(self.prefix + meta.name, meta.size, meta.sha256)

    def confirm_manifest(self, manifest: Manifest) -> None:
        body = manifest.to_bytes()
        self._confirm(self._manifest_key(manifest.queue), len(body),
                      hashlib.sha256(body).hexdigest())

    def _get_bytes(self, name: str) -> bytes:
        response = self._get(name)
        return bytes(response["Body"].read())

    def _get(self, name: str) -> dict[str, Any]:
        try:
            return dict(self._call(f"get {self.address(name)}", self.client.get_object,
                                   Bucket=self.bucket, Key=self.prefix + name))
        except bex.ClientError as exc:
            raise self._refused(f"get {self.address(name)}", exc) from exc

    def get_slice(self, ref: SliceRef) -> SliceContent:
        where = self.address(ref.name)
        response = self._get(ref.name)
        data = bytes(response["Body"].read())
        content = decode_slice(data, ref, where)
        stored = response.get("Metadata", {}).get("sha256")
        if stored != content.meta.sha256:
            raise ChecksumMismatch(
                f"{where}: checksum mismatch (stored {stored}, computed {content.meta.sha256})"
            )
        return content

    def _list(self, prefix: str, delimiter: str | None = None) -> list[dict[str, Any]]:
        pages: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix,
                                  "MaxKeys": self.page_size}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        while True:
            try:
                page = self._call(f"list s3://{self.bucket}/{prefix}",
                                  self.client.list_objects_v2, **kwargs)
            except bex.ClientError as exc:
                raise self._refused(f"list s3://{self.bucket}/{prefix}", exc) from exc
            pages.append(page)
            if not page.get("IsTruncated"):
                return pages
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def list_slices(self, queue: str) -> list[SliceRef]:
        refs = []
        for page in self._list(f"{self.prefix}{queue}/slices/"):
            for obj in page.get("Contents", []):
                try:
                    ref = parse_slice_name(obj["Key"][len(self.prefix):])
                except ValueError:
                    continue  # not ours: a stray object is no slice
                if ref.queue == queue:
                    refs.append(ref)
        return sorted(refs, key=SliceRef.sort_key)

    def delete_slice(self, ref: SliceRef) -> None:
        try:
            self._call(f"delete {self.address(ref.name)}", self.client.delete_object,
                       Bucket=self.bucket, Key=self.prefix + ref.name)
        except bex.ClientError as exc:
            if self._status(exc) != 404:
                raise self._refused(f"delete {self.address(ref.name)}", exc) from exc

    def delete_slices(self, refs: list[SliceRef]) -> None:
        for start in range(0, len(refs), 1000):  # S3's DeleteObjects takes up to 1,000 keys
            chunk = refs[start:start + 1000]
            what = f"delete {len(chunk)} objects under {self.address(chunk[0].queue + '/')}"
            try:
                reply = self._call(what, self.client.delete_objects, Bucket=self.bucket,
                                   Delete={"Objects": [{"Key": self.prefix + r.name}
                                                       for r in chunk], "Quiet": True})
            except bex.ClientError as exc:
                raise self._refused(what, exc) from exc
            failed = [e for e in reply.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if failed:
                raise RemoteRefused(f"{what} refused by {self!r}: {failed[0].get('Key')}: "
                                    f"{failed[0].get('Code')} {failed[0].get('Message')}")

    def slice_count(self, ref: SliceRef) -> int:
        head = self._head(self.prefix + ref.name)
        if head is None:
            raise MissingSlice(f"{self.address(ref.name)} is missing")
        try:
            return int(head.get("Metadata", {})["count"])
        except (KeyError, ValueError) as exc:
            raise ChecksumMismatch(f"{self.address(ref.name)}: no entry count in its "
                                   "metadata") from exc

    def slice_sizes(self, queue: str) -> dict[str, int]:
        sizes = {}
        for page in self._list(f"{self.prefix}{queue}/slices/"):
            for obj in page.get("Contents", []):
                sizes[obj["Key"][len(self.prefix):]] = int(obj.get("Size", 0))
        return sizes

    def queues(self) -> list[str]:
        names = []
        for page in self._list(self.prefix, "/"):
            for common in page.get("CommonPrefixes", []):
                names.append(common["Prefix"][len(self.prefix):].rstrip("/"))
        return sorted(names)

    # -- manifests ------------------------------------------------------------------------

    def _manifest_key(self, queue: str) -> str:
        return f"{self.prefix}{queue}/manifest.json"

    def read_manifest(self, queue: str) -> Manifest | None:
        key = self._manifest_key(queue)
        try:
            response = self._call(f"get s3://{self.bucket}/{key}", self.client.get_object,
                                  Bucket=self.bucket, Key=key)
        except bex.ClientError as exc:
            if self._status(exc) == 404:
                return None
            raise self._refused(f"get s3://{self.bucket}/{key}", exc) from exc
        return Manifest.from_bytes(response["Body"].read(), response.get("ETag"),
                                   f"s3://{self.bucket}/{key}")

    def write_manifest(self, new: Manifest, expected: Manifest | None) -> Manifest:
        if expected is not None and not id_lt(expected.head, new.head):
            raise ManifestConflict(
                f"refusing to move the manifest of {new.queue!r} from {expected.head} "
                f"to {new.head}: it only moves forward"
            )
        return self._put_manifest(new, expected)

    def rewrite_manifest(self, new: Manifest, expected: Manifest) -> Manifest:
        if (new.queue, new.head) != (expected.queue, expected.head):
            raise ManifestConflict(
                f"refusing to rewrite the manifest of {expected.queue!r} at {expected.head} "
                f"into one at {new.head}: a rewrite keeps the head"
            )
        return self._put_manifest(new, expected)

    def _put_manifest(self, new: Manifest, expected: Manifest | None) -> Manifest:
        """Put ``new`` only if the stored manifest is still ``expected`` (its ETag)."""
        key = self._manifest_key(new.queue)
        condition: dict[str, str] = (
            {"IfNoneMatch": "*"} if expected is None else {"IfMatch": expected.etag or "*"}
        )
        new = replace(new, updated_at=int(time.time() * 1000))
        body = new.to_bytes()
        try:
            response = self._call(
                f"put s3://{self.bucket}/{key}", self.client.put_object, Bucket=self.bucket,
                Key=key, Body=body, ContentType="application/json",
                Metadata={"sha256": hashlib.sha256(body).hexdigest(), "head": new.head},
                **condition,
            )
        except bex.ClientError as exc:
            if self._status(exc) in (409, 412):
                raise ManifestConflict(
                    f"the manifest s3://{self.bucket}/{key} changed under us"
                ) from exc
            raise self._refused(f"put s3://{self.bucket}/{key}", exc) from exc
        return replace(new, etag=response.get("ETag"))
