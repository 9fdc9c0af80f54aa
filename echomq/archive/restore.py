"""Restore: rebuild a floor from the remote alone, proving nothing is missing.

The chain is planned before anything is read (:mod:`echomq.archive.restore_plan`: every
slice the manifest lists must be there; a bucket with slices but no manifest is refused
unless the operator asks to rebuild from the chain of names alone). Each object is then
read ahead and checked (:mod:`echomq.archive.restore_fetch`: stored sha256, gzip, header,
order) and held to the chain (:mod:`echomq.archive.restore_chain`: its digest against the
manifest's, its ``prev_digest`` against the slice before it, and, where a floor exists,
against the digests that floor uploaded), then committed to the floor; commits are
idempotent, so an interrupted restore simply resumes. A slice that is not on the
manifest's chain is reported as an orphan and skipped. Verify, which writes nothing, is
:mod:`echomq.archive.verify`.
"""

from __future__ import annotations

import os
from contextlib import closing
from datetime import datetime
from typing import TYPE_CHECKING

from echomq.archive.entries import to_ms
from echomq.archive.floor import Floor
from echomq.archive.report import QueueReport
from echomq.archive.restore_chain import Chain
from echomq.archive.restore_fetch import Batch, fetched
from echomq.archive.restore_plan import Plan, plan, report_for
from echomq.archive.slices import SliceContent, SliceMeta
from echomq.archive.stream_ids import ZERO_ID, id_lt, last_id_of, parse_stream_id
from echomq.errors import InvalidArgument
from echomq.progress import Tick, bars

if TYPE_CHECKING:
    from echomq.archive.remote import Remote


def until_id(value: int | datetime | str) -> str:
    """The last stream id a point-in-time restore keeps: a stream id as given, or every id
    of the millisecond ``value`` (ms since the epoch or a datetime, naive means UTC) and
    before it."""
    if isinstance(value, str):
        if "-" not in value:
            raise InvalidArgument(f"until is a stream id ('ms-seq'), ms or a datetime, "
                                  f"got {value!r}")
        first, seq = parse_stream_id(value)
        return f"{first}-{seq}"
    ms = to_ms(value)
    if ms is None or ms < 0:
        raise InvalidArgument(f"until must be a time at or after the epoch, got {value!r}")
    return last_id_of(ms)


def _cut(content: SliceContent, until: str) -> SliceContent | None:
    """The part of a (verified) slice at or before ``until``, as a slice of its own with no
    digest: the floor keeps its entries but never counts it as uploaded, so a later restore
    without a cut replaces it with the whole slice."""
    kept = [item for item in content.items if not id_lt(until, item[0])]
    if not kept:
        return None
    meta = content.meta
    return SliceContent(SliceMeta(meta.queue, kept[0][0], kept[-1][0], meta.prev, len(kept),
                                  "", 0, "", meta.prev_digest), b"", kept)


def pull(remote: Remote, floor: Floor, queue: str, tick: Tick | None = None, *,
         rebuild_manifest: bool = False, until: str | None = None) -> tuple[int, QueueReport]:
    """Commit every chain slice past the floor's checkpoint; returns (new slices, report).

    Every slice is checked against the chain, the manifest and what this floor recorded
    before it is committed. Downloads run ``PREFETCH`` slices ahead of the commits, so the
    object store's latency overlaps the floor's work. With ``until`` (a stream id) only the
    chain up to the slice holding it is read and checked, and of that slice only the
    entries up to ``until`` are kept.
    """
    the_plan = plan(remote, queue, rebuild_manifest=rebuild_manifest, until=until)
    report = report_for(the_plan)
    links = Chain(remote, the_plan, floor, until)
    _start_at_base(floor, the_plan, until)
    checkpoint = floor.checkpoint(queue)
    start = next((i for i, ref in enumerate(the_plan.chain) if id_lt(checkpoint, ref.last)),
                 len(the_plan.chain))
    todo = the_plan.chain[start:]
    if until is not None:
        report.head = min(the_plan.head, until, key=parse_stream_id)
    report.skipped = start
    if tick and report.skipped:
        tick(report.skipped)
    prev_digest = links.prev_digest(start) if start < len(the_plan.chain) else None
    index = start
    with closing(fetched(remote, todo)) as wholes, Batch(floor, report) as batch:
        for whole in wholes:
            for content in links.slices_of(index, whole):
                if until is not None and id_lt(until, content.meta.first):
                    break
                prev_digest = links.check(content, prev_digest)
                kept: SliceContent | None = content
                if until is not None and id_lt(until, content.meta.last):
                    kept = _cut(content, until)
                if kept is not None:
                    batch.add(kept)
            index += 1
            if tick:
                tick(1)
    report.head_digest = links.head_digest()
    return report.slices, report


def _start_at_base(floor: Floor, the_plan: Plan, until: str | None) -> None:
    """A floor behind a pruned chain's start forgets what the bucket forgot and starts
    there (a fresh floor: everything dropped counts as accounted for the gap checks)."""
    base = the_plan.base
    if base.through == ZERO_ID:
        return
    if until is not None and id_lt(until, base.through):
        raise InvalidArgument(
            f"{the_plan.queue}: the archive was pruned through {base.through}; a point in "
            f"time before it ({until}) is no longer held"
        )
    checkpoint = floor.checkpoint(the_plan.queue)
    if id_lt(checkpoint, base.through):
        floor.drop_through(the_plan.queue, base.through, digest=base.digest,
                           accounted=base.entries if checkpoint == ZERO_ID else None)


def restore(remote: Remote, floor_path: Floor | str | os.PathLike[str],
            queues: list[str] | None = None, progress: bool | None = None, *,
            rebuild_manifest: bool = False, until: int | datetime | str | None = None
            ) -> dict[str, QueueReport]:
    """Rebuild (or resume rebuilding) a floor from ``remote`` alone, verified.

    A queue whose bucket has slices but no manifest is refused with
    :class:`ManifestMissing` unless ``rebuild_manifest``: then what the chain of slices
    holds is restored and the report's ``head``/``head_digest`` say where it ends.

    ``until`` restores a point in time: exactly the outcomes recorded up to it (a stream
    id, inclusive, or a time: ms since the epoch or a datetime, every entry of that
    millisecond and before), verified along the chain up to the slice that holds it;
    slices after it are never read. Into a floor already past that point nothing is
    removed: restore into a fresh path.
    """
    last = None if until is None else until_id(until)
    floor = floor_path if isinstance(floor_path, Floor) else Floor(floor_path)
    reports: dict[str, QueueReport] = {}
    try:
        names = queues if queues is not None else remote.queues()
        with bars(progress, "restore") as task:
            for queue in names:
                total = len(remote.list_slices(queue))
                _, reports[queue] = pull(remote, floor, queue, task(queue, total),
                                         rebuild_manifest=rebuild_manifest, until=last)
    finally:
        if floor is not floor_path:
            floor.close()
    return reports
