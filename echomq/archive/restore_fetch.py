"""The two ends of a restore's pipe: objects read ahead from the remote by threads, and
checked slices committed to the floor in batches.

Downloads run ``PREFETCH`` objects ahead of the caller, so the object store's latency and
the decode (gunzip and sha256 let other threads run) overlap the floor's work; commits
gather ``BATCH_ENTRIES`` entries, since each synced LMDB commit costs milliseconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from itertools import islice
from typing import TYPE_CHECKING

from echomq.archive.floor import Floor
from echomq.archive.quiet_gc import quiet_gc
from echomq.archive.report import QueueReport
from echomq.archive.slices import SliceContent, SliceRef
from echomq.errors import ArchiveError

if TYPE_CHECKING:
    from echomq.archive.remote import Remote

PREFETCH = 2
BATCH_ENTRIES = 10_000
"""Entries of checked slices committed to the floor in one transaction (see ``Batch``)."""


def fetched(remote: Remote, refs: Sequence[SliceRef]) -> Generator[SliceContent, None, None]:
    """``refs``' objects read and checked (``get_slice``), in order; ``PREFETCH`` of them
    are downloaded and decoded ahead by threads, so the store's latency and the decode
    (gunzip and sha256 let other threads run) overlap the caller's work. Close it (it
    waits for the reads in flight) when stopping early."""
    later = iter(refs)
    with ThreadPoolExecutor(max_workers=PREFETCH, thread_name_prefix="emq-restore") as pool:
        pending: deque[Future[SliceContent]] = deque(
            pool.submit(remote.get_slice, ref) for ref in islice(later, PREFETCH))
        while pending:
            whole = pending.popleft().result()
            nxt = next(later, None)
            if nxt is not None:
                pending.append(pool.submit(remote.get_slice, nxt))
            yield whole


class Batch:
    """Checked slices waiting for one floor transaction: small slices (a fold every 30 s,
    a pack split back into them) commit by the ``BATCH_ENTRIES``, since each synced commit
    costs milliseconds; a crash loses only the uncommitted batch, which a rerun fetches
    again from the floor's checkpoint."""

    def __init__(self, floor: Floor, report: QueueReport) -> None:
        self.floor, self.report = floor, report
        self.contents: list[SliceContent] = []
        self.entries = 0

    def add(self, content: SliceContent) -> None:
        self.contents.append(content)
        self.entries += len(content.items)
        if self.entries >= BATCH_ENTRIES:
            self.commit()

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Commit what is waiting, also when the restore stops on an error: every slice
        here passed its checks, so a rerun starts after it (a second failure of the floor
        itself is not allowed to hide the first)."""
        if kind is None:
            self.commit()
            return
        with suppress(ArchiveError):
            self.commit()

    def commit(self) -> None:
        if not self.contents:
            return
        with quiet_gc():
            results = self.floor.commit_slices(self.contents, uploaded=True)
        for added in results:
            if added is not None:
                self.report.slices += 1
                self.report.entries += added[0]
                self.report.quarantined += added[1]
        self.contents, self.entries = [], 0
