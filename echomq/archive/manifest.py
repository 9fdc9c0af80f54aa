"""The manifest: how far a queue's contiguous chain of slices reaches in the remote.

It records every slice's digest on the way and only ever moves forward; this module is its
type and its JSON encoding, the remote (:mod:`echomq.archive.remote`) stores it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from echomq.archive.slices import GENESIS, SliceMeta
from echomq.errors import ManifestCorrupt

MANIFEST_FORMAT = "emq-manifest/2"
Link = tuple[str, str, str]
"""One slice in a manifest: its first id, last id and digest (its ``prev`` is the last id
of the link before, ``0-0`` for the first)."""


@dataclass(frozen=True, slots=True)
class Manifest:
    """How far a queue's contiguous chain of slices reaches in the remote, and the digest
    of every slice on it (``chain``, in history order)."""

    queue: str
    head: str
    slices: int
    entries: int
    updated_at: int = 0
    etag: str | None = field(default=None, compare=False)
    chain: tuple[Link, ...] = ()

    @property
    def head_digest(self) -> str:
        """The digest of the newest slice: it fixes every slice before it."""
        return self.chain[-1][2] if self.chain else GENESIS

    def extended(self, meta: SliceMeta) -> Manifest:
        """This manifest with ``meta`` appended as the new head."""
        return Manifest(meta.queue, meta.last, self.slices + 1, self.entries + meta.count,
                        chain=self.chain + ((meta.first, meta.last, meta.digest),))

    def to_bytes(self) -> bytes:
        body = {"format": MANIFEST_FORMAT, "queue": self.queue, "head": self.head,
                "head_digest": self.head_digest, "slices": self.slices,
                "entries": self.entries, "updated_at": self.updated_at,
                "chain": [list(link) for link in self.chain]}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, etag: str | None, where: str = "manifest") -> Manifest:
        try:
            obj = json.loads(data)
            if obj.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format {obj.get('format')!r}, expected {MANIFEST_FORMAT!r} "
                                 "(older manifests predate chained slices)")
            chain = tuple((str(a), str(b), str(c)) for a, b, c in obj["chain"])
            new = cls(str(obj["queue"]), str(obj["head"]), int(obj["slices"]),
                      int(obj["entries"]), int(obj.get("updated_at", 0)), etag, chain)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ManifestCorrupt(f"{where}: unreadable manifest ({exc})") from exc
        if new.slices != len(chain) or (chain and chain[-1][1] != new.head):
            raise ManifestCorrupt(f"{where}: its chain of {len(chain)} slices does not end at "
                                  f"its head {new.head} ({new.slices} slices)")
        return new


def next_manifest(manifest: Manifest | None, meta: SliceMeta) -> Manifest:
    """The manifest after ``meta`` is appended (to nothing: the queue's first slice)."""
    return (manifest or Manifest(meta.queue, "0-0", 0, 0)).extended(meta)
