"""The remote's contract: what the driver, restore, prune and compaction need from object
storage holding every slice and one manifest per queue (:class:`Remote`), and an S3
endpoint handed over as plain values (:class:`Endpoint`). The one implementation is
:class:`~echomq.archive.s3_remote.S3Remote`.

Slices are written create-only: an object, once there, is never replaced, so a retried or
duplicated upload is recognised by its stored checksum instead of overwriting history. The
manifest records how far the contiguous chain of slices reaches, and every slice's digest
on the way; it only ever moves forward, by compare-and-swap, so a driver with a fresh,
empty floor cannot publish a manifest that hides older history.

A store can answer 200 and keep nothing (a broken proxy, a misconfigured gateway), so an
upload is not trusted until ``confirm_slice`` / ``confirm_manifest`` see it stored with the
expected size and sha256: nothing is trimmed before that.
"""

from __future__ import annotations

from typing import Protocol

from echomq.archive.manifest import Manifest
from echomq.archive.slices import SliceContent, SliceMeta, SliceRef


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
    what :meth:`~echomq.archive.s3_remote.S3Remote.from_endpoint` reads, without the
    archive knowing who made it."""

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
