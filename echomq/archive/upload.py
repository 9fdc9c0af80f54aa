"""The fold's upload steps: put a slice, confirm it stored, advance the manifest over it.

A slice goes up only when it continues the remote's chain (its ``prev`` and digest are the
manifest's head); it is confirmed stored before the manifest points at it, and the
manifest is confirmed before anything is trimmed. A slice the manifest already lists with
the same digest was uploaded before a crash and is only put back if the store lost it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from echomq.archive.floor import Floor
from echomq.archive.fold_lease import FoldLease
from echomq.archive.manifest import Manifest, next_manifest
from echomq.archive.remote import ManifestConflict, Remote
from echomq.archive.restore import pull
from echomq.archive.slices import GENESIS, SliceContent, SliceMeta, decode_slice
from echomq.archive.stream_ids import ZERO_ID, id_lt
from echomq.errors import RemoteConflict

if TYPE_CHECKING:
    from echomq.archive.driver import _Tally


def superseded(meta: SliceMeta, manifest: Manifest | None) -> bool:
    """Whether the remote's chain already covers this unuploaded slice's range with other
    slices (another driver folded the queue while this floor's slice waited): the chain
    runs past the slice's start, does not list it, and the slice starts on the chain at a
    link with the very digest it chains from (so this floor's uploaded history is the
    remote's). Anything else is left to the upload, which refuses a diverging history."""
    if manifest is None or not id_lt(meta.prev, manifest.head):
        return False
    if any(link[:2] == (meta.first, meta.last) for link in manifest.chain):
        return False  # uploaded before a crash (or a differing history): the upload decides
    if meta.prev == ZERO_ID:
        return meta.prev_digest == GENESIS
    return any(link[1] == meta.prev and link[2] == meta.prev_digest
               for link in manifest.chain)


class UploadSteps:
    """The upload steps of a :class:`~echomq.archive.driver.Driver` (mixed into it)."""

    floor: Floor
    remote: Remote | None
    hook: Callable[[str], None] | None

    def _at(self, point: str) -> None:
        """Call the hook at a named crash point (``CRASH_POINTS``): where tests kill a fold."""
        if self.hook is not None:
            self.hook(point)

    # -- the remote -----------------------------------------------------------------------

    def _sync(self, queue: str, lease: FoldLease, tally: _Tally) -> Manifest | None:
        """Upload what an earlier fold committed but did not upload; catch up if behind."""
        assert self.remote is not None
        manifest = self.remote.read_manifest(queue)
        for meta in self.floor.pending_slices(queue):
            if superseded(meta, manifest):  # another driver folded this range meanwhile
                tally.counts["dropped"] += self.floor.drop_pending(queue)
                break
            content = decode_slice(self.floor.slice_bytes(meta), meta.ref)
            manifest = self._upload(content, manifest, lease, tally)
        if manifest is not None and id_lt(self.floor.checkpoint(queue), manifest.head):
            lease.renew()  # and again after every slice: a long catch-up keeps the queue
            slices, _ = pull(self.remote, self.floor, queue, lambda _: lease.renew())
            tally.counts["pulled"] += slices
        return manifest

    def _upload(self, content: SliceContent, manifest: Manifest | None, lease: FoldLease,
                tally: _Tally) -> Manifest | None:
        """Put one slice and advance the manifest over it; then mark it uploaded."""
        assert self.remote is not None
        meta = content.meta
        lease.renew()
        self._at("during_upload")
        for _ in range(3):  # re-read the manifest when another writer moved it
            head = manifest.head if manifest is not None else ZERO_ID
            if head == meta.prev:
                if manifest is None:
                    self._check_unmanifested(content)
                self._check_chain_head(content, manifest)
                self.remote.put_slice(content)
                self._at("before_manifest")
                self._confirm_slice(content)
                new = next_manifest(manifest, meta)
                try:
                    manifest = self.remote.write_manifest(new, manifest)
                except ManifestConflict:
                    manifest = self.remote.read_manifest(meta.queue)
                    continue
                self._confirm_manifest(manifest)
            elif not id_lt(head, meta.last) and self._already_linked(content, manifest):
                pass  # uploaded before a crash, and the manifest already covers it
            else:
                raise RemoteConflict(
                    f"{self.remote.address(meta.name)}: the remote's manifest for "
                    f"{meta.queue!r} is at {head}, but this floor's next unuploaded slice "
                    f"follows {meta.prev}; nothing is trimmed. Rebuild this floor with "
                    "restore, or point the driver at its own remote prefix."
                )
            self.floor.mark_uploaded(meta, keep_digest=True)  # one transaction, one sync
            tally.counts["uploaded"] += 1
            self._at("after_upload")
            return manifest
        raise RemoteConflict(f"the manifest of {meta.queue!r} keeps moving; another driver "
                             "is uploading without the lease")

    # -- the chain of custody (items 15, 16) -----------------------------------------------

    def _prev_digest(self, queue: str) -> str:
        """The digest a new slice chains from: the floor's newest slice (none without a
        remote, whose slices are chained when they are uploaded)."""
        return self.floor.last_digest(queue) if self.remote is not None else ""

    def _check_chain_head(self, content: SliceContent, manifest: Manifest | None) -> None:
        """The remote's newest slice must be the one this floor's slice follows: a manifest
        whose head digest differs holds another (or a rewritten) history."""
        assert self.remote is not None
        head_digest = manifest.head_digest if manifest is not None else ""  # the genesis
        if content.meta.prev_digest != head_digest:
            raise RemoteConflict(
                f"{self.remote.address(content.meta.name)}: the remote's newest slice of "
                f"{content.meta.queue!r} has digest {head_digest or '(none)'}, but this "
                f"floor's slice follows {content.meta.prev_digest or '(none)'}: the remote's "
                "history differs from this floor's (rewritten?); nothing is uploaded or "
                "trimmed. Run verify with this floor."
            )

    def _confirm_slice(self, content: SliceContent) -> None:
        """Before the manifest points at the slice (and before any trim), see it stored: a
        store that answers 200 and keeps nothing raises ``UploadUnconfirmed`` here."""
        assert self.remote is not None
        self.remote.confirm_slice(content.meta)

    def _confirm_manifest(self, manifest: Manifest) -> None:
        """The manifest that now covers the slice is stored as written, or raise."""
        assert self.remote is not None
        self.remote.confirm_manifest(manifest)

    def _already_linked(self, content: SliceContent, manifest: Manifest | None) -> bool:
        """The slice is stored and the manifest lists it with this very digest."""
        assert self.remote is not None
        meta = content.meta
        listed = [link for link in (manifest.chain if manifest else ())
                  if link[:2] == (meta.first, meta.last)]
        if listed and listed[0][2] != meta.digest:
            raise RemoteConflict(
                f"{self.remote.address(meta.name)}: the remote's manifest records digest "
                f"{listed[0][2]} for this slice, this floor {meta.digest}: the histories "
                "differ; nothing is trimmed. Run verify with this floor."
            )
        if not listed:
            return False
        if not self.remote.has_slice(content):  # listed, but the store lost it: put it back
            self.remote.put_slice(content)
            self._confirm_slice(content)
        return True

    def _check_unmanifested(self, content: SliceContent) -> None:
        """No manifest yet: refuse if the remote already holds other slices of the queue."""
        assert self.remote is not None
        others = [r for r in self.remote.list_slices(content.meta.queue)
                  if r != content.meta.ref]
        if others:
            raise RemoteConflict(
                f"{self.remote.address(others[0].name)} exists but the queue has no "
                "manifest; refusing to start a second history over it (verify the remote)"
            )
