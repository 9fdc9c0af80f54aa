"""The manifest: how far a queue's contiguous chain of slices reaches in the remote.

It records every slice's digest on the way and only ever moves forward; this module is its
type and its JSON encoding, the remote (:mod:`echomq.archive.remote`) stores it.

Retention and compaction add three things (format ``emq-manifest/3``, written only once a
queue was pruned or compacted, so an older reader refuses it instead of misreading it):

- ``base``: where the chain starts once a prune dropped its oldest slices, with the digest
  of the last slice dropped; verification starts there instead of at the genesis.
- ``pruned``: what each prune dropped (range, counts, the digest that fixed it, when, by
  which policy), oldest first.
- ``packs``: objects that each hold a run of consecutive slices merged by a compaction.
  The chain itself (``chain``) never changes: a pack is checked by splitting it back into
  the slices it replaced and recomputing each one's digest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from echomq.archive.slices import GENESIS, SliceMeta, SliceRef
from echomq.archive.stream_ids import ZERO_ID, id_lt
from echomq.errors import ManifestCorrupt

MANIFEST_FORMAT = "emq-manifest/2"
MANIFEST_FORMAT_3 = "emq-manifest/3"
Link = tuple[str, str, str]
"""One slice in a manifest: its first id, last id and digest (its ``prev`` is the last id
of the link before, ``0-0`` for the first)."""


@dataclass(frozen=True, slots=True)
class Base:
    """Where a pruned chain starts: ``through`` is the last id dropped, ``digest`` the
    digest of the last slice dropped (what the first kept slice chains from); ``slices``
    and ``entries`` count everything ever dropped."""

    through: str = ZERO_ID
    digest: str = GENESIS
    slices: int = 0
    entries: int = 0


@dataclass(frozen=True, slots=True)
class Pruned:
    """One prune: slices ``first``..``through`` dropped (their newest outcome older than
    the policy's cutoff); ``digest`` is the digest of the last one, which fixes them all."""

    first: str
    through: str
    slices: int
    entries: int
    digest: str
    at: int
    policy: str

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class Pack:
    """One object holding the chain's slices from ``first`` to ``last`` merged; ``digest``
    is the digest of the pack's own bytes."""

    first: str
    last: str
    digest: str


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
    base: Base = Base()
    pruned: tuple[Pruned, ...] = ()
    packs: tuple[Pack, ...] = ()

    @property
    def head_digest(self) -> str:
        """The digest of the newest slice: it fixes every slice before it."""
        return self.chain[-1][2] if self.chain else self.base.digest

    def extended(self, meta: SliceMeta) -> Manifest:
        """This manifest with ``meta`` appended as the new head."""
        return replace(self, head=meta.last, slices=self.slices + 1,
                       entries=self.entries + meta.count, updated_at=0, etag=None,
                       chain=self.chain + ((meta.first, meta.last, meta.digest),))

    def objects(self) -> list[tuple[SliceRef, tuple[Link, ...], str | None]]:
        """The objects holding the chain, in order: (its name, the slices it holds, the
        pack's own digest or None for a plain slice)."""
        packs = {p.first: p for p in self.packs}
        out: list[tuple[SliceRef, tuple[Link, ...], str | None]] = []
        prev, i = self.base.through, 0
        while i < len(self.chain):
            pack = packs.get(self.chain[i][0])
            j = i
            if pack is not None:
                while self.chain[j][1] != pack.last:
                    j += 1
            links = self.chain[i:j + 1]
            out.append((SliceRef(self.queue, links[0][0], links[-1][1], prev), links,
                        None if pack is None else pack.digest))
            prev, i = links[-1][1], j + 1
        return out

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "format": MANIFEST_FORMAT, "queue": self.queue, "head": self.head,
            "head_digest": self.head_digest, "slices": self.slices, "entries": self.entries,
            "updated_at": self.updated_at, "chain": [list(link) for link in self.chain]}
        if self.base != Base() or self.pruned or self.packs:
            body["format"] = MANIFEST_FORMAT_3
            body["base"] = {"through": self.base.through, "digest": self.base.digest,
                            "slices": self.base.slices, "entries": self.base.entries}
            body["pruned"] = [p.to_dict() for p in self.pruned]
            body["packs"] = [[p.first, p.last, p.digest] for p in self.packs]
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, etag: str | None, where: str = "manifest") -> Manifest:
        try:
            obj = json.loads(data)
            if obj.get("format") not in (MANIFEST_FORMAT, MANIFEST_FORMAT_3):
                raise ValueError(f"format {obj.get('format')!r}, expected {MANIFEST_FORMAT!r} "
                                 f"or {MANIFEST_FORMAT_3!r} (older manifests predate chained "
                                 "slices)")
            chain = tuple((str(a), str(b), str(c)) for a, b, c in obj["chain"])
            raw_base = obj.get("base") or {}
            base = Base(str(raw_base.get("through", ZERO_ID)),
                        str(raw_base.get("digest", GENESIS)), int(raw_base.get("slices", 0)),
                        int(raw_base.get("entries", 0)))
            pruned = tuple(Pruned(str(p["first"]), str(p["through"]), int(p["slices"]),
                                  int(p["entries"]), str(p["digest"]), int(p["at"]),
                                  str(p["policy"])) for p in obj.get("pruned", ()))
            packs = tuple(Pack(str(a), str(b), str(c)) for a, b, c in obj.get("packs", ()))
            new = cls(str(obj["queue"]), str(obj["head"]), int(obj["slices"]),
                      int(obj["entries"]), int(obj.get("updated_at", 0)), etag, chain, base,
                      pruned, packs)
        except (ValueError, KeyError, TypeError, AttributeError,
                RecursionError) as exc:  # JSON nested past the stack's depth
            raise ManifestCorrupt(f"{where}: unreadable manifest ({exc})") from exc
        if new.slices != len(chain) or new.head != (chain[-1][1] if chain else base.through):
            raise ManifestCorrupt(f"{where}: its chain of {len(chain)} slices does not end at "
                                  f"its head {new.head} ({new.slices} slices)")
        _check_packs(new, where)
        return new


def _check_packs(manifest: Manifest, where: str) -> None:
    """Every pack starts and ends on slice boundaries, in order, without overlap."""
    firsts = {link[0]: n for n, link in enumerate(manifest.chain)}
    lasts = {link[1]: n for n, link in enumerate(manifest.chain)}
    after = -1
    for pack in manifest.packs:
        start, end = firsts.get(pack.first), lasts.get(pack.last)
        if start is None or end is None or start <= after or end < start:
            raise ManifestCorrupt(f"{where}: pack {pack.first}..{pack.last} does not cover "
                                  "whole slices of its chain in order")
        after = end


def next_manifest(manifest: Manifest | None, meta: SliceMeta) -> Manifest:
    """The manifest after ``meta`` is appended (to nothing: the queue's first slice)."""
    return (manifest or Manifest(meta.queue, "0-0", 0, 0)).extended(meta)


def without_packs_before(packs: Iterable[Pack], through: str) -> tuple[Pack, ...]:
    """The packs that still hold slices after ``through`` (a prune drops whole objects,
    so a pack is either wholly kept or wholly dropped)."""
    return tuple(p for p in packs if id_lt(through, p.last))
