"""The fold driver: stream -> floor -> remote -> trim, one slice at a time.

For each slice, in this order: read it after the floor's checkpoint (``XRANGE`` with an
exclusive start), commit it to the floor with the checkpoint advance (one LMDB
transaction), upload it as one create-only object and advance the remote's manifest, and
only then trim the stream up to the slice's last id. Trimming never passes what is in the
floor and, with a remote, in the remote too. Each step is idempotent, so a crash anywhere
(see ``CRASH_POINTS``) is repaired by the next fold: first it uploads what the floor
holds but the remote lacks, then trims what is safely in both.

Two more guards stand before every trim. The stream is checked for entries lost after the
floor's checkpoint (trimmed or deleted by someone else): such a fold stops with
:class:`StreamGap`, records the gap in the floor and trims nothing until an operator
acknowledges it (:meth:`Driver.acknowledge_gap`). And only a driver that writes to the
stream's archive of record trims (see :mod:`echomq.queue.declared`); any other folds
into its floor and reports ``trim_refused``.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import redis

from echomq.archive.entries import MAX_U64, entry_line, id_after, id_key, id_lt, parse_stream_id
from echomq.archive.floor import Floor, Gap, GapBaseline
from echomq.archive.fold_lease import FoldLease
from echomq.archive.remote import Manifest, ManifestConflict, Remote
from echomq.archive.report import ArchiveReport
from echomq.archive.restore import pull
from echomq.archive.slices import ZERO_ID, RawItem, SliceContent, build_slice, decode_slice
from echomq.errors import (
    ArchiveError,
    ConnectionFailed,
    InvalidArgument,
    NotArchiveOfRecord,
    NotDeclared,
    StreamUnavailable,
)
from echomq.errors import RemoteConflict as RemoteConflict
from echomq.errors import StreamGap as StreamGap
from echomq.errors import StreamRewound as StreamRewound
from echomq.queue.connection import Connection
from echomq.queue.declared import (
    archive_of_record,
    declared_queues,
    is_declared,
    record_address,
)
from echomq.queue.keys import Keys

log = logging.getLogger(__name__)
_REDIS_FAILED = (redis.RedisError, ConnectionFailed)
"""A Redis failure: a raw client's, or one the executor (the fold lease's scripts) named."""

CRASH_POINTS = ("after_floor_commit", "during_upload", "before_manifest", "after_upload",
                "before_trim", "after_trim")
"""Where ``hook(name)`` is called; tests kill the driver at each to prove convergence."""


@contextmanager
def _quiet_gc() -> Iterator[None]:
    """No cyclic GC while one slice is in memory: tens of thousands of young, acyclic
    objects would trigger collection passes that find nothing and cost a third of the
    fold's time. Reference counting still frees everything; GC resumes after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(slots=True)
class FoldReport(ArchiveReport):
    """What one fold did. ``entries`` counts every new stream entry, quarantined included."""

    uploaded: int = 0
    pulled: int = 0
    trimmed: int = 0
    checkpoint: str = ZERO_ID
    seconds: float = 0.0
    error: str | None = None
    trim_refused: str | None = None


class _Tally:
    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.counts = dict.fromkeys(("entries", "quarantined", "slices", "uploaded", "pulled",
                                     "trimmed"), 0)
        self.started = time.perf_counter()
        self.trim_refused: str | None = None
        self.record_checked = False

    def freeze(self, checkpoint: str, error: str | None = None) -> FoldReport:
        return FoldReport(self.queue, **self.counts, checkpoint=checkpoint,
                          seconds=time.perf_counter() - self.started, error=error,
                          trim_refused=self.trim_refused)


class Driver:
    """Folds declared outcome streams into a floor (and a remote, when given).

    ``slice_count`` and ``slice_bytes`` bound one slice (its object and its LMDB
    transaction). ``lease_ms`` is the fold lease; with ``wait_ms`` > 0 a held lease is
    waited for, otherwise :class:`~echomq.errors.LeaseHeld` is raised at once.
    """

    def __init__(
        self,
        conn: Connection,
        floor: Floor | str | os.PathLike[str],
        remote: Remote | None = None,
        *,
        slice_count: int = 5000,
        slice_bytes: int = 8 * 1024 * 1024,
        lease_ms: int = 30_000,
        wait_ms: int = 0,
        hook: Callable[[str], None] | None = None,
        compress_level: int = 1,
    ) -> None:
        for name, value in (("slice_count", slice_count), ("slice_bytes", slice_bytes),
                            ("lease_ms", lease_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"{name} must be a positive integer, got {value!r}")
        self.conn = conn
        self.redis = conn.redis
        # The same pool, minus redis-py's per-entry reply parsing: XRANGE is the hot read.
        self._raw: redis.Redis | None = None
        if isinstance(self.redis, redis.Redis):  # a cluster client keeps the parsed path
            self._raw = redis.Redis(connection_pool=self.redis.connection_pool)
            self._raw.set_response_callback("XRANGE", lambda reply, **_: reply)
        self._owns_floor = not isinstance(floor, Floor)
        self.floor = floor if isinstance(floor, Floor) else Floor(floor)
        self.remote = remote
        self.slice_count = slice_count
        self.slice_bytes = slice_bytes
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.hook = hook
        self.compress_level = compress_level
        self._lease_token = uuid.uuid4().hex
        self._folding = threading.Lock()

    def close(self) -> None:
        if self._owns_floor:
            self.floor.close()

    def _at(self, point: str) -> None:
        if self.hook is not None:
            self.hook(point)

    # -- the fold -------------------------------------------------------------------------

    def fold(self, queue: str) -> FoldReport:
        """Fold everything in ``queue``'s stream at the call, slice by slice.

        Raises ``NotDeclared`` for an undeclared stream, ``LeaseHeld`` when another
        driver folds it, ``RemoteUnavailable`` (after the floor commit stands and with
        nothing unsafe trimmed) when the object store keeps failing, and
        ``StreamUnavailable`` when the Redis server fails mid-fold. The exception carries
        the partial report as ``.report``. One driver folds one queue at a time: its folds
        share one lease token, so a fold whose lease release was lost to a server failure
        does not lock this driver's next fold out.
        """
        keys = Keys(queue)
        tally = _Tally(queue)
        try:
            with self._folding:
                if not is_declared(self.conn, queue):
                    raise NotDeclared(f"the outcome stream of {queue!r} is not declared; "
                                      "declare it before archiving (it is never trimmed "
                                      "otherwise)")
                lease = FoldLease(self.redis, queue, self.lease_ms, self.wait_ms,
                                  token=self._lease_token, url=self.conn.url).acquire()
                try:
                    self._fold_slices(keys, queue, lease, tally)
                finally:
                    with suppress(*_REDIS_FAILED):  # never mask the fold's own error
                        lease.release()
        except _REDIS_FAILED as exc:
            error = StreamUnavailable(f"the Redis server failed while folding {queue!r} "
                                      f"(nothing unsafe was trimmed): {exc}")
            error.report = tally.freeze(self._checkpoint_or_unknown(queue), repr(error))  # type: ignore[attr-defined]
            raise error from exc
        except ArchiveError as exc:
            exc.report = tally.freeze(self._checkpoint_or_unknown(queue), repr(exc))  # type: ignore[attr-defined]
            raise
        return tally.freeze(self.floor.checkpoint(queue))

    def _fold_slices(self, keys: Keys, queue: str, lease: FoldLease, tally: _Tally) -> None:
        """Repair what an earlier fold left (upload, trim), then fold slice by slice."""
        end = self._stream_end(keys, queue)
        manifest = self._sync(queue, lease, tally) if self.remote is not None else None
        self._check_gap(keys, queue)
        self._trim(queue, lease, tally)
        while end is not None:
            checkpoint = self.floor.checkpoint(queue)
            if not id_lt(checkpoint, end):
                break
            lease.renew()
            with _quiet_gc():
                content = self._read_slice(keys, queue, checkpoint, end)
                self._check_gap(keys, queue)  # after the read: it may have missed some
                if content is None:
                    break
                self._commit(content, tally)
            if self.remote is not None:
                manifest = self._upload(content, manifest, lease, tally)
            self._trim(queue, lease, tally)

    def fold_declared(self) -> dict[str, FoldReport]:
        """Fold every declared queue once; a queue that fails is reported with ``error``
        set (and logged) and the others still fold."""
        reports: dict[str, FoldReport] = {}
        for queue in declared_queues(self.conn):
            try:
                reports[queue] = self.fold(queue)
            except ArchiveError as exc:
                log.warning("archive fold of %r failed: %s", queue, exc)
                reports[queue] = getattr(exc, "report", None) or FoldReport(queue,
                                                                             error=repr(exc))
        return reports

    def _checkpoint_or_unknown(self, queue: str) -> str:
        """The checkpoint for a failure's report; a floor that fails to read is no reason
        to hide the first error."""
        try:
            return self.floor.checkpoint(queue)
        except ArchiveError:
            return "?"

    def _stream_end(self, keys: Keys, queue: str) -> str | None:
        """The last id in the stream now (None: empty). Refuses a stream whose last
        generated id went below the floor's checkpoint (recreated, or rolled back by a
        failover): trimming it by id would remove entries the archive never saw."""
        try:
            info = self.redis.xinfo_stream(keys.completions)
        except redis.ResponseError:
            return None  # no stream yet
        generated = str(info.get("last-generated-id") or ZERO_ID)
        checkpoint = self.floor.checkpoint(queue)
        if id_lt(generated, checkpoint):
            raise StreamRewound(
                f"the outcome stream of {queue!r} was last written at {generated}, before the "
                f"floor's checkpoint {checkpoint}: it was recreated or rolled back. Nothing "
                "is folded or trimmed until an operator checks it."
            )
        last = info.get("last-entry")
        return str(last[0]) if last else None

    def _read_slice(self, keys: Keys, queue: str, after: str, end: str) -> SliceContent | None:
        if self._raw is not None:
            raw = self._raw.execute_command(  # type: ignore[no-untyped-call]
                "XRANGE", keys.completions, f"({after}", end, "COUNT", self.slice_count
            )
        else:
            parsed: Any = self.redis.xrange(keys.completions, min=f"({after}", max=end,
                                            count=self.slice_count)
            raw = [(sid, [x for kv in f.items() for x in kv]) for sid, f in parsed]
        items: list[RawItem] = []
        size = 0
        for sid, flat in raw:
            it = iter(flat)
            fields = dict(zip(it, it, strict=True))
            line = entry_line(sid, fields)
            size += len(line) + 1
            if items and size > self.slice_bytes:
                break
            items.append((sid, fields, line))
        if not items:
            return None
        return build_slice(queue, after, items, self.compress_level,
                           encode=self.remote is not None,
                           prev_digest=self._prev_digest(queue))

    def _commit(self, content: SliceContent, tally: _Tally) -> None:
        added = self.floor.commit_slice(content, uploaded=False,
                                        keep_bytes=self.remote is not None)
        if added is not None:
            tally.counts["slices"] += 1
            tally.counts["entries"] += added[0] + added[1]
            tally.counts["quarantined"] += added[1]
        self._at("after_floor_commit")

    # -- the remote -----------------------------------------------------------------------

    def _sync(self, queue: str, lease: FoldLease, tally: _Tally) -> Manifest | None:
        """Upload what an earlier fold committed but did not upload; catch up if behind."""
        assert self.remote is not None
        manifest = self.remote.read_manifest(queue)
        for meta in self.floor.pending_slices(queue):
            content = decode_slice(self.floor.slice_bytes(meta), meta.ref)
            manifest = self._upload(content, manifest, lease, tally)
        if manifest is not None and id_lt(self.floor.checkpoint(queue), manifest.head):
            lease.renew()
            slices, _ = pull(self.remote, self.floor, queue)
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
                new = self._next_manifest(manifest, content)
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
            self.floor.keep_digest(meta)
            self.floor.mark_uploaded(meta)
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

    @staticmethod
    def _next_manifest(manifest: Manifest | None, content: SliceContent) -> Manifest:
        """The manifest with ``content`` appended (to nothing: the queue's first slice)."""
        meta = content.meta
        return (manifest or Manifest(meta.queue, ZERO_ID, 0, 0)).extended(meta)

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

    # -- the trim -------------------------------------------------------------------------

    def _trim(self, queue: str, lease: FoldLease, tally: _Tally) -> None:
        safe = self.floor.safe_trim_point(queue, with_remote=self.remote is not None)
        if safe == ZERO_ID or not self._may_trim(queue, tally):
            return
        self._at("before_trim")
        writes, also = self._archives()
        try:
            tally.counts["trimmed"] += lease.trim(id_after(safe), writes, also)
        except NotArchiveOfRecord:
            self._refuse_trim(queue, tally, archive_of_record(self.conn, queue))
            return
        self.floor.record_trim(queue, safe)
        self._at("after_trim")

    # -- the archive of record ------------------------------------------------------------

    def _archives(self) -> tuple[str, str]:
        """The record this driver claims (its remote, else its floor), and its floor."""
        floor = record_address(self.floor)
        if self.remote is None:
            return floor, ""
        return record_address(self.remote), floor

    def _may_trim(self, queue: str, tally: _Tally) -> bool:
        """Whether this driver writes the stream's archive of record (asked once a fold;
        the fenced trim checks again). Unset: the trim claims it."""
        if not tally.record_checked:
            tally.record_checked = True
            record = archive_of_record(self.conn, queue)
            if record is not None and record not in self._archives():
                self._refuse_trim(queue, tally, record)
        return tally.trim_refused is None

    def _refuse_trim(self, queue: str, tally: _Tally, record: str | None) -> None:
        writes = " and ".join(a for a in self._archives() if a)
        tally.trim_refused = (f"the archive of record of {queue!r} is {record}; this driver "
                              f"writes {writes}, so it folds into its floor but never trims")
        log.warning("archive: %s", tally.trim_refused)

    # -- gaps: entries lost before the floor took them ------------------------------------

    def _check_gap(self, keys: Keys, queue: str) -> None:
        """Stop with :class:`StreamGap` (recorded in the floor) when entries after the
        checkpoint left the stream unfolded. Our own trims never pass the checkpoint, so
        they never look like a gap."""
        try:
            info = self.redis.xinfo_stream(keys.completions)
        except redis.ResponseError:
            return  # no stream
        if "entries-added" not in info:  # before Redis 7: the server cannot tell
            return
        base = self.floor.gap_baseline(queue)
        loss = _find_loss(info, base)
        if loss is None:
            self._anchor(queue, info, base)
            return
        upto, count = loss
        if count is None and base.accounted is not None:
            count = (int(info["entries-added"]) - base.accounted - int(info["length"])
                     + self._count_through(keys, base.checkpoint))
        gap = self.floor.record_gap(queue, base.checkpoint, upto, count)
        log.error("archive: %s", gap.describe())
        raise StreamGap(gap)

    def _anchor(self, queue: str, info: dict[str, Any], base: GapBaseline) -> None:
        """A floor from before the count learns it while nothing at or before its
        checkpoint is left in the stream (then every entry ever added but not present is
        at or before it)."""
        if base.accounted is None and _head_cut(info, base.checkpoint):
            self.floor.anchor_accounted(queue, base.checkpoint,
                                        int(info["entries-added"]) - int(info["length"]))

    def _count_through(self, keys: Keys, last: str) -> int:
        """How many entries at or before ``last`` the stream still holds (gap path only)."""
        count, start = 0, "-"
        while True:
            batch: Any = self.redis.xrange(keys.completions, min=start, max=last,
                                           count=10_000)
            count += len(batch)
            if len(batch) < 10_000:
                return count
            start = f"({batch[-1][0]}"

    def acknowledge_gap(self, queue: str, by: str | None = None, note: str = "") -> list[Gap]:
        """Accept the open gaps of ``queue`` as lost so folds go on; returns them (empty:
        none was open). The acknowledgement is recorded in the floor with ``by``."""
        who = by or os.environ.get("USER") or "unknown"
        gaps = self.floor.acknowledge_gaps(queue, who, note)
        for gap in gaps:
            log.warning("archive: gap acknowledged: %s", gap.describe())
        return gaps


def _head_cut(info: dict[str, Any], checkpoint: str) -> bool:
    """Nothing at or before ``checkpoint`` is left in the stream."""
    first = info.get("first-entry")
    return not first or id_lt(checkpoint, str(first[0]))


def _id_before(value: str) -> str:
    ms, seq = parse_stream_id(value)
    return f"{ms}-{seq - 1}" if seq else f"{ms - 1}-{MAX_U64}"


def _find_loss(info: dict[str, Any], base: GapBaseline) -> tuple[str, int | None] | None:
    """(the highest lost id bound, how many were lost) or None when nothing was lost.

    Deletions (XDEL) after what the floor holds raise ``max-deleted-entry-id`` past it.
    Trims cut the head: when nothing at or before the checkpoint is left, every entry
    ever added but not present was either accounted for by the floor or lost. The count
    is ``None`` when it needs the stream counted (the caller does it).
    """
    held = max(base.checkpoint, base.acknowledged_upto, key=id_key)
    deleted = str(info.get("max-deleted-entry-id") or ZERO_ID)
    head_cut = _head_cut(info, base.checkpoint)
    missing = None
    if head_cut and base.accounted is not None:
        missing = int(info["entries-added"]) - int(info["length"]) - base.accounted
    if not id_lt(held, deleted) and not (missing is not None and missing > 0):
        return None
    bounds = [deleted] if id_lt(held, deleted) else []
    if head_cut:
        first = info.get("first-entry")
        bounds.append(_id_before(str(first[0])) if first
                      else str(info.get("last-generated-id") or ZERO_ID))
    return max(bounds, key=id_key), missing


def fold_declared(conn: Connection, floor: Floor | str | os.PathLike[str],
                  remote: Remote | None = None, **options: object) -> dict[str, FoldReport]:
    """Fold every declared queue once (the scheduler's job). A queue that fails is
    reported with ``error`` set and the others still fold."""
    try:
        driver = Driver(conn, floor, remote, **options)  # type: ignore[arg-type]
    except ArchiveError as exc:  # the floor cannot open: every queue failed, by name
        log.warning("archive fold failed: %s", exc)
        return {q: FoldReport(q, error=repr(exc)) for q in declared_queues(conn)}
    try:
        return driver.fold_declared()
    finally:
        driver.close()
