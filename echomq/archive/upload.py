"""A fold's uploads: put a slice, confirm it stored, advance the manifest over it.

A slice goes up only when it continues the remote's chain (its ``prev`` and digest are the
manifest's head); it is confirmed stored before the manifest points at it, and the
manifest is confirmed before anything is trimmed. A slice the manifest already lists with
the same digest was uploaded before a crash and is only put back if the store lost it.
"""

from __future__ import annotations

from collections.abc import Callable

from echomq.archive.floor import Floor
from echomq.archive.fold_lease import FoldLease
from echomq.archive.manifest import Manifest, next_manifest
from echomq.archive.remote import Remote
from echomq.archive.report import Tally
from echomq.archive.restore import pull
from echomq.archive.slices import GENESIS, SliceContent, SliceMeta, decode_slice
from echomq.archive.stream_ids import ZERO_ID, id_lt
from echomq.errors import ManifestConflict, RemoteConflict


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


class Uploader:
    """One fold's uploads to the remote, made only when the driver has one: it keeps the
    remote's manifest as the fold moves it. ``at`` is the fold's crash-point hook.

    :meth:`upload` runs on the fold's upload thread while the next slice is read; the
    fold waits for it before the next upload, so the manifest has one writer at a time.
    """

    def __init__(self, remote: Remote, floor: Floor, queue: str, lease: FoldLease,
                 tally: Tally, at: Callable[[str], None]) -> None:
        self.remote = remote
        self.floor = floor
        self.queue = queue
        self.lease = lease
        self.tally = tally
        self.at = at
        self.manifest: Manifest | None = None

    def catch_up(self) -> None:
        """Upload what an earlier fold committed but did not upload; pull if behind."""
        self.manifest = self.remote.read_manifest(self.queue)
        for meta in self.floor.pending_slices(self.queue):
            if superseded(meta, self.manifest):  # another driver folded this range meanwhile
                self.tally.add("dropped", self.floor.drop_pending(self.queue))
                break
            self.upload(decode_slice(self.floor.slice_bytes(meta), meta.ref))
        if self.manifest is not None and id_lt(self.floor.checkpoint(self.queue),
                                               self.manifest.head):
            self.lease.renew()  # and again after every slice: a long catch-up keeps it
            slices, _ = pull(self.remote, self.floor, self.queue,
                             lambda _: self.lease.renew())
            self.tally.add("pulled", slices)

    def upload(self, content: SliceContent) -> None:
        """Put one slice and advance the manifest over it; then mark it uploaded."""
        meta = content.meta
        self.lease.renew()
        self.at("during_upload")
        for _ in range(3):  # re-read the manifest when another writer moved it
            manifest = self.manifest
            head = manifest.head if manifest is not None else ZERO_ID
            if head == meta.prev:
                if manifest is None:
                    self._check_unmanifested(content)
                self._check_chain_head(content, manifest)
                self.remote.put_slice(content)
                self.at("before_manifest")
                self.remote.confirm_slice(content.meta)  # a store that keeps nothing: raise
                try:
                    manifest = self.remote.write_manifest(next_manifest(manifest, meta),
                                                          manifest)
                except ManifestConflict:
                    self.manifest = self.remote.read_manifest(meta.queue)
                    continue
                self.remote.confirm_manifest(manifest)  # stored as written, or raise
                self.manifest = manifest
            elif not id_lt(head, meta.last) and self._already_linked(content):
                pass  # uploaded before a crash, and the manifest already covers it
            else:
                raise RemoteConflict(
                    f"{self.remote.address(meta.name)}: the remote's manifest for "
                    f"{meta.queue!r} is at {head}, but this floor's next unuploaded slice "
                    f"follows {meta.prev}; nothing is trimmed. Rebuild this floor with "
                    "restore, or point the driver at its own remote prefix."
                )
            self.floor.mark_uploaded(meta, keep_digest=True)  # one transaction, one sync
            self.tally.add("uploaded")
            self.at("after_upload")
            return
        raise RemoteConflict(f"the manifest of {meta.queue!r} keeps moving; another driver "
                             "is uploading without the lease")

    # -- the chain of custody ---------------------------------------------------------------

    def _check_chain_head(self, content: SliceContent, manifest: Manifest | None) -> None:
        """The remote's newest slice must be the one this floor's slice follows: a manifest
        whose head digest differs holds another (or a rewritten) history."""
        head_digest = manifest.head_digest if manifest is not None else ""  # the genesis
        if content.meta.prev_digest != head_digest:
            raise RemoteConflict(
                f"{self.remote.address(content.meta.name)}: the remote's newest slice of "
                f"{content.meta.queue!r} has digest {head_digest or '(none)'}, but this "
                f"floor's slice follows {content.meta.prev_digest or '(none)'}: the remote's "
                "history differs from this floor's (rewritten?); nothing is uploaded or "
                "trimmed. Run verify with this floor."
            )

    def _already_linked(self, content: SliceContent) -> bool:
        """The slice is stored and the manifest lists it with this very digest."""
        meta = content.meta
        listed = [link for link in (self.manifest.chain if self.manifest else ())
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
            self.remote.confirm_slice(content.meta)
        return True

    def _check_unmanifested(self, content: SliceContent) -> None:
        """No manifest yet: refuse if the remote already holds other slices of the queue."""
        others = [r for r in self.remote.list_slices(content.meta.queue)
                  if r != content.meta.ref]
        if others:
            raise RemoteConflict(
                f"{self.remote.address(others[0].name)} exists but the queue has no "
                "manifest; refusing to start a second history over it (verify the remote)"
            )
