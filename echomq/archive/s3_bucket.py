"""One bucket under one key prefix, through one boto3 client: every request S3Remote's
parts send, with bounded retries, and the store's refusals turned into the archive's errors.

The slices (:mod:`echomq.archive.s3_slices`) and the manifests
(:mod:`echomq.archive.s3_manifests`) share this one object, so a retry policy, a timeout
or the way a refusal is named cannot differ between them.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import boto3
import botocore.exceptions as bex
from botocore.config import Config

from echomq.errors import RemoteRefused, RemoteUnavailable, UploadUnconfirmed

T = TypeVar("T")
_session_lock = threading.Lock()
_session: boto3.session.Session | None = None
_RETRY_CODES = {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout",
                "Throttling", "ThrottlingException", "RequestTimeTooSkewed"}


def status_of(exc: bex.ClientError) -> int:
    """The HTTP status of a refused request (0 when the reply has none)."""
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


class S3Bucket:
    """The client, the bucket and the key prefix of one remote, and how it asks.

    Requests that fail with connection errors, 429 or 5xx are retried ``retries`` times
    with exponential backoff, then raise :class:`RemoteUnavailable`; ``label`` names the
    remote in every error, as its owner prints itself.
    """

    def __init__(self, bucket: str, prefix: str, endpoint_url: str | None,
                 region: str | None, keys: tuple[str | None, str | None], *,
                 request_checksum_calculation: str, retries: int, backoff_s: float,
                 timeout_s: float, addressing_style: str | None, page_size: int) -> None:
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self.retries = retries
        self.backoff_s = backoff_s
        self.page_size = page_size
        where = f" at {endpoint_url}" if endpoint_url else ""
        self.label = f"S3Remote(s3://{bucket}/{prefix}{where})"
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
                aws_access_key_id=keys[0], aws_secret_access_key=keys[1], config=config,
            )

    def address(self, name: str) -> str:
        """The ``s3://`` address of the object ``name`` under the prefix."""
        return f"s3://{self.bucket}/{self.prefix}{name}"

    def call(self, what: str, fn: Callable[..., T], **kwargs: Any) -> T:
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
            f"{what} failed after {self.retries + 1} attempts ({self.label}): {last}"
        ) from last

    def refused(self, what: str, exc: bex.ClientError) -> RemoteRefused:
        """The archive's error for a request the store refused for good."""
        err = exc.response.get("Error", {})
        return RemoteRefused(f"{what} refused by {self.label}: {err.get('Code')} "
                             f"{err.get('Message')}")

    def head(self, key: str) -> dict[str, Any] | None:
        """The object's HEAD reply, or None when it is absent."""
        address = f"s3://{self.bucket}/{key}"
        try:
            return dict(self.call(f"head {address}", self.client.head_object,
                                  Bucket=self.bucket, Key=key))
        except bex.ClientError as exc:
            if status_of(exc) == 404:
                return None
            raise self.refused(f"head {address}", exc) from exc

    def get(self, name: str) -> dict[str, Any]:
        """The GET reply of the object ``name`` under the prefix (its body unread)."""
        try:
            return dict(self.call(f"get {self.address(name)}", self.client.get_object,
                                  Bucket=self.bucket, Key=self.prefix + name))
        except bex.ClientError as exc:
            raise self.refused(f"get {self.address(name)}", exc) from exc

    def pages(self, prefix: str, delimiter: str | None = None) -> list[dict[str, Any]]:
        """Every page of a listing of the full key ``prefix``, followed to its end."""
        pages: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix,
                                  "MaxKeys": self.page_size}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        while True:
            try:
                page = self.call(f"list s3://{self.bucket}/{prefix}",
                                 self.client.list_objects_v2, **kwargs)
            except bex.ClientError as exc:
                raise self.refused(f"list s3://{self.bucket}/{prefix}", exc) from exc
            pages.append(page)
            if not page.get("IsTruncated"):
                return pages
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def ensure(self) -> None:
        """Create the bucket unless it is there (already owned counts as there)."""
        try:
            self.call("head bucket", self.client.head_bucket, Bucket=self.bucket)
            return
        except bex.ClientError as exc:
            if status_of(exc) != 404:
                raise self.refused(f"head bucket {self.bucket}", exc) from exc
        region = self.client.meta.region_name
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if region and region not in ("us-east-1", "auto"):
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self.call("create bucket", self.client.create_bucket, **kwargs)
        except bex.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in (
                "BucketAlreadyOwnedByYou", "BucketAlreadyExists"
            ):
                raise self.refused(f"create bucket {self.bucket}", exc) from exc

    def confirm(self, key: str, size: int, sha256: str) -> None:
        """The object at ``key`` is stored with this size and sha256 metadata, or raise
        :class:`UploadUnconfirmed`: a store can answer 200 and keep nothing."""
        head = self.head(key)
        address = f"s3://{self.bucket}/{key}"
        if head is None:
            raise UploadUnconfirmed(f"{address}: the store accepted the upload but does not "
                                    f"have the object ({self.label}); nothing is trimmed")
        stored = (int(head.get("ContentLength", -1)), head.get("Metadata", {}).get("sha256"))
        if stored != (size, sha256):
            raise UploadUnconfirmed(
                f"{address}: stored as {stored[0]} bytes with sha256 {stored[1]}, but "
                f"{size} bytes with sha256 {sha256} were sent ({self.label}); nothing is "
                "trimmed")
