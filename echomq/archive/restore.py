"""Restore and verify: rebuild a floor from the remote alone, proving nothing is missing.

The chain is planned from object names before anything is read: starting at ``0-0``,
each next slice is the one whose ``prev`` is the current last id, and the chain must
reach the manifest's head. A broken link raises :class:`~echomq.errors.MissingSlice`
naming the gap. Each object is then read and checked (stored sha256, gzip, header,
order) and committed to the floor; commits are idempotent, so an interrupted restore
simply resumes. A slice written by a driver that lost its lease and was never linked
into the chain (an orphan) is reported and skipped.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING

from echomq.archive.entries import id_lt
from echomq.archive.floor import Floor
from echomq.archive.slices import ZERO_ID, SliceContent, SliceRef
from echomq.errors import MissingSlice

if TYPE_CHECKING:
    from echomq.archive.remote import Remote

Tick = Callable[[int], None]
PREFETCH = 2


@dataclass(frozen=True, slots=True)
class Plan:
    """The slices of one queue that form its contiguous history, in order."""

    queue: str
    chain: tuple[SliceRef, ...]
    head: str
    orphans: tuple[SliceRef, ...] = ()


@dataclass(slots=True)
class QueueReport:
    """What restore or verify found for one queue."""

    queue: str
    slices: int = 0
    entries: int = 0
    quarantined: int = 0
    skipped: int = 0
    head: str = ZERO_ID
    orphans: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def plan(remote: Remote, queue: str) -> Plan:
    """The chain of ``queue``'s slices from ``0-0``; ``MissingSlice`` if it is broken."""
    refs = remote.list_slices(queue)
    manifest = remote.read_manifest(queue)
    by_prev: dict[str, list[SliceRef]] = defaultdict(list)
    for ref in refs:
        by_prev[ref.prev].append(ref)
    # How far the chain can reach from each slice (successors start after it ends).
    reach: dict[SliceRef, tuple[int, int]] = {}
    for ref in sorted(refs, key=SliceRef.sort_key, reverse=True):
        best = ref.sort_key()[1]
        for nxt in by_prev.get(ref.last, []):
            best = max(best, reach.get(nxt, best))
        reach[ref] = best
    chain: list[SliceRef] = []
    current = ZERO_ID
    while by_prev.get(current):
        ref = max(by_prev[current], key=lambda r: (reach[r], r.sort_key()))
        chain.append(ref)
        current = ref.last
    on_chain = set(chain)
    orphans = tuple(r for r in refs if r not in on_chain)
    beyond = [r for r in orphans if id_lt(current, r.last)]
    where = remote.address(f"{queue}/slices/")
    if beyond:
        raise MissingSlice(
            f"{queue}: the slices after {current} are missing in {where}: the next one listed, "
            f"{beyond[0].name}, follows {beyond[0].prev}"
        )
    if manifest is not None and id_lt(current, manifest.head):
        raise MissingSlice(
            f"{queue}: the chain in {where} ends at {current}, but the manifest records "
            f"history up to {manifest.head} ({manifest.slices} slices): the slice after "
            f"{current} is missing"
        )
    return Plan(queue, tuple(chain), current, tuple(r for r in orphans))


def pull(remote: Remote, floor: Floor, queue: str, tick: Tick | None = None
         ) -> tuple[int, QueueReport]:
    """Commit every chain slice past the floor's checkpoint; returns (new slices, report).

    Downloads run ``PREFETCH`` slices ahead of the commits, so the object store's latency
    overlaps the floor's work.
    """
    the_plan = plan(remote, queue)
    report = QueueReport(queue, head=the_plan.head, orphans=[r.name for r in the_plan.orphans])
    checkpoint = floor.checkpoint(queue)
    todo = [ref for ref in the_plan.chain if id_lt(checkpoint, ref.last)]
    report.skipped = len(the_plan.chain) - len(todo)
    if tick and report.skipped:
        tick(report.skipped)
    with ThreadPoolExecutor(max_workers=PREFETCH, thread_name_prefix="emq-restore") as pool:
        pending: deque[Future[SliceContent]] = deque()
        refs = iter(todo)
        for ref in islice(refs, PREFETCH):
            pending.append(pool.submit(remote.get_slice, ref))
        while pending:
            content = pending.popleft().result()
            nxt = next(refs, None)
            if nxt is not None:
                pending.append(pool.submit(remote.get_slice, nxt))
            added = floor.commit_slice(content, uploaded=True)
            if added is not None:
                report.slices += 1
                report.entries += added[0]
                report.quarantined += added[1]
            if tick:
                tick(1)
    return report.slices, report


def verify_queue(remote: Remote, queue: str, tick: Tick | None = None) -> QueueReport:
    """Read and check every chain slice of ``queue`` without writing anything."""
    the_plan = plan(remote, queue)
    report = QueueReport(queue, head=the_plan.head, orphans=[r.name for r in the_plan.orphans])
    for ref in the_plan.chain:
        content = remote.get_slice(ref)
        report.slices += 1
        report.entries += content.meta.count
        if tick:
            tick(1)
    return report


@contextmanager
def _progress(enabled: bool | None, label: str) -> Iterator[Callable[[str, int], Tick]]:
    """A rich progress bar on a terminal (or when asked); silent otherwise."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda name, total: (lambda n: None)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress("[bold]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True)) as bar:

        def task(name: str, total: int) -> Tick:
            task_id = bar.add_task(f"{label} {name}", total=total)
            return lambda n: bar.advance(task_id, n)

        yield task


def restore(remote: Remote, floor_path: Floor | str | os.PathLike[str],
            queues: list[str] | None = None, progress: bool | None = None
            ) -> dict[str, QueueReport]:
    """Rebuild (or resume rebuilding) a floor from ``remote`` alone, verified."""
    floor = floor_path if isinstance(floor_path, Floor) else Floor(floor_path)
    reports: dict[str, QueueReport] = {}
    try:
        names = queues if queues is not None else remote.queues()
        with _progress(progress, "restore") as task:
            for queue in names:
                total = len(remote.list_slices(queue))
                _, reports[queue] = pull(remote, floor, queue, task(queue, total))
    finally:
        if floor is not floor_path:
            floor.close()
    return reports


def verify(remote: Remote, queues: list[str] | None = None, progress: bool | None = None
           ) -> dict[str, QueueReport]:
    """Check every queue's chain and every object's checksum; writes nothing."""
    reports: dict[str, QueueReport] = {}
    names = queues if queues is not None else remote.queues()
    with _progress(progress, "verify") as task:
        for queue in names:
            reports[queue] = verify_queue(remote, queue,
                                          task(queue, len(remote.list_slices(queue))))
    return reports
