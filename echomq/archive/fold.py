"""One fold of one queue: stream -> floor -> remote -> trim, one slice at a time.

For each slice, in this order: read it after the floor's checkpoint (``XRANGE`` with an
exclusive start), commit it to the floor with the checkpoint advance (one LMDB
transaction), record that checkpoint in Redis as the queue's ``folded`` mark (fenced by the
lease, never backwards: retention forgets a finished row only once its outcome entry is at
or below it), upload it as one create-only object and advance the remote's manifest, and
only then trim the stream up to the slice's last id. (With a remote, the upload of one
slice runs on a worker thread while the next is read; that next slice is committed only
after the upload stood, and then the uploaded slice is trimmed.) Trimming never passes
what is in the floor and, with a remote, in the remote too. Each step is idempotent, so a
crash anywhere (see ``CRASH_POINTS`` in :mod:`echomq.archive.driver`) is repaired by the
next fold: first it marks what the floor holds, uploads what the floor holds but the
remote lacks, then trims what is safely in both.

Two more guards stand before every trim: the stream checks
(:mod:`echomq.archive.stream_checks`: entries lost after the checkpoint stop the fold with
``StreamGap``) and the custody of the archive of record (:mod:`echomq.archive.custody`).
A :class:`Fold` lives for one fold and holds its state (the queue's keys, the lease, the
tally, the uploader and its manifest); the long-lived :class:`~echomq.archive.driver.Driver`
hands it a :class:`FoldSetup` and keeps nothing of it but the report.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass

import redis

from echomq.archive.custody import Custody
from echomq.archive.floor import Floor
from echomq.archive.fold_lease import FoldLease
from echomq.archive.quiet_gc import quiet_gc
from echomq.archive.remote import Remote
from echomq.archive.report import Tally
from echomq.archive.slices import SliceContent, build_slice
from echomq.archive.stream_checks import StreamChecks
from echomq.archive.stream_ids import ZERO_ID, id_after, id_lt
from echomq.archive.stream_read import read_items
from echomq.archive.upload import Uploader
from echomq.errors import ArchiveError, NotArchiveOfRecord
from echomq.queue.connection import Connection

_OURS = frozenset(("job", "outcome", "attempts", "at"))
"""Fields every entry EchoMQ writes has (``emq_record`` in queue/lua/_lib.lua); an entry
without one is quarantined, so counting them among the quarantined finds them all."""


@dataclass(frozen=True, slots=True)
class FoldSetup:
    """What a fold takes from its driver: the parts it folds with and its bounds.
    ``raw`` is the client whose ``XRANGE`` replies stay unparsed (the hot read; None on a
    cluster client); ``entry_bytes`` the driver's mean entry size per queue, which sizes
    the reads' pages and outlives the fold."""

    conn: Connection
    floor: Floor
    remote: Remote | None
    custody: Custody
    raw: redis.Redis | None
    slice_count: int
    slice_bytes: int
    compress_level: int
    hook: Callable[[str], None] | None
    progress: Callable[[str, int], None] | None
    entry_bytes: dict[str, float | None]


class Fold:
    """One fold of ``queue`` under a held ``lease``, counted in ``tally``."""

    def __init__(self, setup: FoldSetup, queue: str, lease: FoldLease, tally: Tally) -> None:
        self.setup = setup
        self.floor = setup.floor
        self.queue = queue
        self.keys = setup.conn.keys(queue)
        self.lease = lease
        self.tally = tally
        self.checks = StreamChecks(setup.conn.redis, setup.floor, self.keys)
        self.uploader = None if setup.remote is None else Uploader(
            setup.remote, setup.floor, queue, lease, tally, self.at)
        self.trimmed_through: str | None = None
        self._record_checked = False

    def at(self, point: str) -> None:
        """Call the hook at a named crash point (``CRASH_POINTS``): where tests kill a fold."""
        if self.setup.hook is not None:
            self.setup.hook(point)

    def run(self) -> None:
        """Repair what an earlier fold left (mark, upload, trim), then fold slice by slice."""
        try:
            bound = self.checks.clock_bound()
            end = self.checks.stream_end(bound)
            ahead, set_aside = self.checks.foreign_counts(bound)
            self.tally.add("ahead", ahead)
            self.tally.add("set_aside", set_aside)
            self._mark()  # repairs a mark an earlier fold did not record
            if self.uploader is not None:
                self.uploader.catch_up()
            self.checks.check_gap(self.lease)
            self._trim()
            if self.uploader is None:
                self._fold_to_floor(end)
            else:
                with ThreadPoolExecutor(1, thread_name_prefix="emq-upload") as thread:
                    self._fold_and_upload(end, self.uploader, thread)
        finally:
            if self.trimmed_through is not None:  # for status only: once per fold
                with suppress(ArchiveError):  # never mask the fold's own error
                    self.floor.record_trim(self.queue, self.trimmed_through)

    def _fold_to_floor(self, end: str | None) -> None:
        """Per slice: read, commit to the floor, mark, trim."""
        while end is not None:
            checkpoint = self.floor.checkpoint(self.queue)
            if not id_lt(checkpoint, end):
                break
            self.lease.renew()
            with quiet_gc():
                content = self._read_slice(checkpoint, end)
                self.checks.check_gap(self.lease)  # after the read: it may have missed some
                if content is None:
                    break
                self._commit(content)
            self._mark()
            self._trim()

    def _fold_and_upload(self, end: str | None, uploader: Uploader,
                         thread: ThreadPoolExecutor) -> None:
        """Per slice: read, commit, mark, upload (manifest), trim; the upload of one slice
        runs on ``thread`` while the next slice is read and encoded. The next slice is
        committed only once the upload before it stood (then that slice is trimmed), so a
        failed upload leaves exactly one slice pending, as without the overlap."""
        uploading: Future[None] | None = None
        while True:
            checkpoint = self.floor.checkpoint(self.queue)
            content = None
            if end is not None and id_lt(checkpoint, end):
                self.lease.renew()
                with quiet_gc():
                    content = self._read_slice(checkpoint, end)
                    self.checks.check_gap(self.lease)  # after the read: it may have missed some
            if uploading is not None:  # the slice before: uploaded and listed, so trimmed
                uploading.result()
                uploading = None
                self._trim()
            if content is None:
                return
            with quiet_gc():
                self._commit(content)
            self._mark()
            uploading = thread.submit(uploader.upload, content)

    def _read_slice(self, after: str, end: str) -> SliceContent | None:
        setup = self.setup
        items, setup.entry_bytes[self.queue] = read_items(
            setup.conn.redis, self.keys.completions, after, end, count=setup.slice_count,
            max_bytes=setup.slice_bytes, entry_bytes=setup.entry_bytes.get(self.queue),
            fast=setup.raw)
        if not items:
            return None
        # with a remote, a slice chains from the floor's newest (chained as uploaded)
        prev_digest = self.floor.last_digest(self.queue) if self.uploader is not None else ""
        return build_slice(self.queue, after, items, setup.compress_level,
                           encode=self.uploader is not None, prev_digest=prev_digest)

    def _commit(self, content: SliceContent) -> None:
        added = self.floor.commit_slice(content, uploaded=False,
                                        keep_bytes=self.uploader is not None)
        if added is not None:
            self.tally.add("slices")
            self.tally.add("entries", added[0] + added[1])
            self.tally.add("quarantined", added[1])
            if added[1]:  # quarantined: foreign when it lacks a field EchoMQ always writes
                self.tally.add("foreign", sum(1 for _, f, _ in content.items
                                              if not _OURS.issubset(f)))
            if self.setup.progress is not None:
                self.setup.progress(content.meta.queue, added[0] + added[1])
        self.at("after_floor_commit")

    def _mark(self) -> None:
        """Tell Redis how far the floor holds the stream (the meta hash's ``folded``), so
        retention forgets a row only once its outcome is here. The floor commit is the
        line, not the upload: the floor is durable on disk, and the stream itself still
        keeps every entry until the remote has it too. Only the archive of record's
        driver marks (a copy elsewhere does not make forgetting safe); the lease fences it
        and it never moves backwards."""
        checkpoint = self.floor.checkpoint(self.queue)
        if checkpoint == ZERO_ID or not self._may_trim():
            return
        self.floor.check_in_place()
        try:
            self.setup.custody.mark(self.lease, checkpoint)
        except NotArchiveOfRecord:
            self.tally.trim_refused = self.setup.custody.refused_now(self.queue)

    def _trim(self) -> None:
        safe = self.floor.safe_trim_point(self.queue, with_remote=self.uploader is not None)
        if safe == ZERO_ID or not self._may_trim():
            return
        self.floor.check_in_place()
        self.at("before_trim")
        try:
            self.tally.add("trimmed", self.setup.custody.trim(self.lease, id_after(safe)))
        except NotArchiveOfRecord:
            self.tally.trim_refused = self.setup.custody.refused_now(self.queue)
            return
        self.trimmed_through = safe  # recorded in the floor once, as the fold ends
        self.at("after_trim")

    def _may_trim(self) -> bool:
        """Whether this driver writes the stream's archive of record (asked once a fold;
        the fenced mark and trim check again). Unset: the trim claims it, if this driver
        claims."""
        if not self._record_checked:
            self._record_checked = True
            refusal = self.setup.custody.refusal(self.queue)
            if refusal is not None:
                self.tally.trim_refused = refusal
        return self.tally.trim_refused is None
