"""Packs: one object holding a run of consecutive slices merged by a compaction.

A pack is an ordinary slice object over the whole run (its ``prev`` and ``prev_digest``
are the run's first slice's), so it decodes and checksums like any slice. What keeps the
chain verifiable is that it can be split back into the slices it replaced, exactly: each
slice's digest is the sha256 of its header and its entries' lines, and both are rebuilt
from the pack (the boundaries come from the manifest's chain), so a split slice's digest
must equal the one the manifest recorded when that slice was first uploaded. An entry
changed, added, dropped or moved across a boundary changes a digest, and verify names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from echomq.archive.manifest import Link
from echomq.archive.slices import SliceContent, build_slice
from echomq.archive.stream_ids import id_lt
from echomq.errors import ChainBroken


def split_pack(content: SliceContent, links: Sequence[Link], where: str) -> list[SliceContent]:
    """The slices ``links`` (the run a pack holds, in order) rebuilt from ``content``, each
    with its recomputed digest and chained ``prev_digest`` (no object bytes: they are
    committed to a floor, never uploaded again)."""
    meta, items = content.meta, content.items
    parts: list[SliceContent] = []
    prev, prev_digest, start = meta.prev, meta.prev_digest, 0
    for first, last, _ in links:
        end = start
        while end < len(items) and not id_lt(last, items[end][0]):
            end += 1
        run = items[start:end]
        if not run or run[0][0] != first or run[-1][0] != last:
            raise ChainBroken(f"{where}: the pack does not hold the slice {first}..{last} "
                              "its manifest lists: it was rewritten")
        rebuilt = build_slice(meta.queue, prev, run, 0, prev_digest=prev_digest)
        parts.append(SliceContent(replace(rebuilt.meta, sha256="", size=0), b"", run))
        prev, prev_digest, start = last, rebuilt.meta.digest, end
    if start != len(items):
        raise ChainBroken(f"{where}: the pack holds {len(items) - start} entries after the "
                          "slices its manifest lists: it was rewritten")
    return parts


def build_pack(contents: Sequence[SliceContent], level: int = 6) -> SliceContent:
    """One object holding ``contents`` (consecutive slices of one chain, already
    verified), chained where the first of them was."""
    first = contents[0].meta
    items = [item for content in contents for item in content.items]
    return build_slice(first.queue, first.prev, items, level, prev_digest=first.prev_digest)
