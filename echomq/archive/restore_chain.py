"""The checks of a restore or a verify, slice by slice, along a :class:`Plan`.

Each object read is checked against what the manifest, the floor and the slice before it
say it must be: its digest against the manifest's, its ``prev_digest`` against the slice
before it, and, where a floor exists, every slice that floor uploaded against the chain.
A mismatch raises :class:`~echomq.errors.ChainBroken` naming the slice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from echomq.archive.floor import Floor
from echomq.archive.packs import split_pack
from echomq.archive.restore_plan import Plan
from echomq.archive.slices import GENESIS, SliceContent
from echomq.archive.stream_ids import ZERO_ID, id_lt
from echomq.errors import ChainBroken, MissingSlice

if TYPE_CHECKING:
    from echomq.archive.remote import Remote


class Chain:
    """Checks, slice by slice, that what is read is what the manifest, the floor and the
    previous slice say it must be."""

    def __init__(self, remote: Remote, the_plan: Plan, floor: Floor | None,
                 until: str | None = None) -> None:
        self.remote = remote
        self.plan = the_plan
        self.expected: dict[str, str] = dict(zip((link[0] for link in the_plan.links),
                                                 the_plan.digests, strict=False))
        self.by_last: dict[str, str] = {link[1]: link[2] for link in the_plan.links}
        self.by_last[ZERO_ID] = GENESIS
        if the_plan.base.through != ZERO_ID and (the_plan.base.digest or not the_plan.rebuilt):
            self.by_last[the_plan.base.through] = the_plan.base.digest
        self.seen: list[str] = []
        if floor is not None:
            self._against_floor(floor, until)

    def _against_floor(self, floor: Floor, until: str | None) -> None:
        """Every slice this floor uploaded or restored must be on the chain, same digest
        (up to ``until``, where a point-in-time plan ends; from the base on, where a prune
        the floor has not applied yet ends the chain)."""
        chain = ({(link[0], link[1]) for link in self.plan.links} if self.plan.links
                 else {(r.first, r.last) for r in self.plan.chain})  # a plan of names alone
        for meta in floor.uploaded_slices(self.plan.queue):
            if until is not None and id_lt(until, meta.first):
                break
            if not id_lt(self.plan.base.through, meta.last):
                continue  # dropped by a prune of the bucket
            if (meta.first, meta.last) not in chain and id_lt(self.plan.head, meta.last):
                raise MissingSlice(
                    f"{self.plan.queue}: the floor uploaded {self.remote.address(meta.name)} "
                    f"(through {meta.last}) but the bucket's chain ends at {self.plan.head}: "
                    "its newest history was removed"
                )
            if (meta.first, meta.last) not in chain:
                raise ChainBroken(
                    f"{self.remote.address(meta.name)}: the floor uploaded this slice but the "
                    "bucket's chain does not hold it: the bucket's history was rewritten"
                )
            known = self.expected.setdefault(meta.first, meta.digest)
            if known != meta.digest:
                raise ChainBroken(
                    f"{self.remote.address(meta.name)}: the manifest records digest {known}, "
                    f"but the floor uploaded {meta.digest}: the slice was rewritten"
                )

    def prev_digest(self, index: int) -> str | None:
        """The digest object ``index`` must chain from (None: unknown, not checked)."""
        return self.by_last.get(self.plan.chain[index].prev) if self.plan.chain else None

    def slices_of(self, index: int, content: SliceContent) -> list[SliceContent]:
        """The slices object ``index`` holds: itself, or a pack split back into them."""
        links = self.plan.parts[index] if self.plan.parts else ()
        pack = self.plan.packs[index] if self.plan.packs else None
        if pack is None:
            return [content]
        where = self.remote.address(content.meta.name)
        if content.meta.digest != pack:
            raise ChainBroken(f"{where}: the pack's digest is {content.meta.digest} but "
                              f"{pack} was recorded when it was written: it was rewritten")
        return split_pack(content, links, where)

    def check(self, content: SliceContent, prev_digest: str | None) -> str:
        """Raise :class:`ChainBroken` naming the slice unless it is the expected one."""
        meta = content.meta
        where = self.remote.address(meta.name)
        if prev_digest is not None and meta.prev_digest != prev_digest:
            raise ChainBroken(
                f"{where}: it follows a slice with digest {meta.prev_digest or '(none)'}, but "
                f"the slice before it has digest {prev_digest or '(none)'}: this slice or "
                "the one before was rewritten, or they were reordered"
            )
        want = self.expected.get(meta.first)
        if want is not None and meta.digest != want:
            raise ChainBroken(
                f"{where}: its digest is {meta.digest} but {want} was recorded when it was "
                "uploaded: the slice was rewritten"
            )
        self.seen.append(meta.digest)
        return meta.digest

    def head_digest(self) -> str:
        """The digest of the chain's newest slice, as read or as recorded."""
        the_plan = self.plan
        if self.seen:
            return self.seen[-1]
        if not the_plan.chain:
            return the_plan.base.digest
        if the_plan.links:
            return the_plan.links[-1][2]
        return self.expected.get(the_plan.chain[-1].first, "")
