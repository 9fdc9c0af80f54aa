"""S3Remote: the :class:`~echomq.archive.remote.Remote` on any S3-compatible store.

It is assembled from three parts, one job each: the bucket and how every request is sent
(:mod:`echomq.archive.s3_bucket`), the slice objects (:mod:`echomq.archive.s3_slices`) and
the manifests (:mod:`echomq.archive.s3_manifests`); this class only builds them and answers
the contract through them.
"""

from __future__ import annotations

from typing import Any

from echomq.archive.manifest import Manifest
from echomq.archive.remote import Endpoint
from echomq.archive.s3_bucket import S3Bucket
from echomq.archive.s3_manifests import S3Manifests
from echomq.archive.s3_slices import S3Slices
from echomq.archive.slices import SliceContent, SliceMeta, SliceRef
from echomq.errors import InvalidArgument


class S3Remote:
    """A :class:`~echomq.archive.remote.Remote` on any S3-compatible store, through boto3.

    Without keys boto3's standard credentials chain applies (env, profile, instance role).
    ``endpoint_url`` selects a non-AWS store (SeaweedFS, moto, Tigris). Requests that fail
    with connection errors, 429 or 5xx are retried ``retries`` times with exponential
    backoff, then raise :class:`~echomq.errors.RemoteUnavailable`.
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
        self.s3 = S3Bucket(bucket, prefix, endpoint_url, region,
                           (aws_access_key_id, aws_secret_access_key),
                           request_checksum_calculation=request_checksum_calculation,
                           retries=retries, backoff_s=backoff_s, timeout_s=timeout_s,
                           addressing_style=addressing_style, page_size=page_size)
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self.client: Any = self.s3.client
        """The boto3 client itself, for what the contract does not cover."""
        self._slices = S3Slices(self.s3)
        self._manifests = S3Manifests(self.s3)
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
        return self.s3.label

    def ensure_bucket(self) -> None:
        """Create the bucket unless it is there."""
        self.s3.ensure()

    def address(self, name: str) -> str:
        return self.s3.address(name)

    def record_address(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return self.address("") + where

    def queues(self) -> list[str]:
        names = []
        for page in self.s3.pages(self.prefix, "/"):
            for common in page.get("CommonPrefixes", []):
                names.append(common["Prefix"][len(self.prefix):].rstrip("/"))
        return sorted(names)

    # -- slices ---------------------------------------------------------------------------

    def put_slice(self, content: SliceContent) -> bool:
        return self._slices.put(content)

    def has_slice(self, content: SliceContent) -> bool:
        return self._slices.stored_matches(content)

    def confirm_slice(self, meta: SliceMeta) -> None:
        self._slices.confirm(meta)

    def get_slice(self, ref: SliceRef) -> SliceContent:
        return self._slices.get(ref)

    def list_slices(self, queue: str) -> list[SliceRef]:
        return self._slices.of_queue(queue)

    def delete_slice(self, ref: SliceRef) -> None:
        self._slices.delete(ref)

    def delete_slices(self, refs: list[SliceRef]) -> None:
        self._slices.delete_many(refs)

    def slice_count(self, ref: SliceRef) -> int:
        return self._slices.count(ref)

    def slice_sizes(self, queue: str) -> dict[str, int]:
        return self._slices.sizes(queue)

    # -- manifests ------------------------------------------------------------------------

    def read_manifest(self, queue: str) -> Manifest | None:
        return self._manifests.read(queue)

    def confirm_manifest(self, manifest: Manifest) -> None:
        self._manifests.confirm(manifest)

    def write_manifest(self, new: Manifest, expected: Manifest | None) -> Manifest:
        return self._manifests.write(new, expected)

    def rewrite_manifest(self, new: Manifest, expected: Manifest) -> Manifest:
        return self._manifests.rewrite(new, expected)
