"""The fold driver: stream -> floor -> remote -> trim, one slice at a time.

For each slice, in this order: read it after the floor's checkpoint (``XRANGE`` with an
exclusive start), commit it to the floor with the checkpoint advance (one LMDB
transaction), record that checkpoint in Redis as the queue's ``folded`` mark (fenced by the
lease, never backwards: retention forgets a finished row only once its outcome entry is at
or below it), upload it as one create-only object and advance the remote's manifest, and
only then trim the stream up to the slice's last id. (With a remote, the upload of one
slice runs on a worker thread while the next is read; that next slice is committed only
after the upload stood, and then the uploaded slice is trimmed.) Trimming never passes
what is in the floor and, with a remote, in the remote too. Each step is idempotent, so a
crash anywhere (see ``CRASH_POINTS``) is repaired by the next fold: first it marks what the
floor holds, uploads what the floor holds but the remote lacks, then trims what is safely
in both.

Two more guards stand before every trim. The stream is checked for entries lost after the
floor's checkpoint (trimmed or deleted by someone else): such a fold stops with
:class:`StreamGap`, records the gap in the floor and trims nothing until an operator
acknowledges it (:meth:`Driver.acknowledge_gap`). And only a driver that writes to the
stream's archive of record trims (see :mod:`echomq.queue.declared`); any other folds
into its floor and reports ``trim_refused``. A stream whose record nobody declared is
claimed only by a driver with a remote, or one told to (``claim_record=True``): a one-off
floor-only fold must never take the stream from the deployment's archive by trimming
first (the production driver would then stop with a gap, its bucket holding none of it).

The steps live beside it: the stream checks in :mod:`echomq.archive.stream_checks`, the
upload, confirm and manifest steps in :mod:`echomq.archive.upload`; this module keeps
their order.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass

import redis

from echomq.archive.floor import Floor, Gap
from echomq.archive.fold_lease import FoldLease
from echomq.archive.manifest import Manifest
from echomq.archive.quiet_gc import quiet_gc
from echomq.archive.remote import Remote
from echomq.archive.report import ArchiveReport
from echomq.archive.sharing import (
    Roster,
    check_driver_name,
    default_name,
    fair_share,
    holder_name,
)
from echomq.archive.slices import SliceContent, build_slice
from echomq.archive.stream_checks import StreamChecks
from echomq.archive.stream_ids import ZERO_ID, id_after, id_lt
from echomq.archive.stream_read import read_items
from echomq.archive.upload import UploadSteps
from echomq.errors import (
    ArchiveError,
    ConnectionFailed,
    InvalidArgument,
    LeaseHeld,
    LeaseLost,
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

_OURS = frozenset(("job", "outcome", "attempts", "at"))
"""Fields every entry EchoMQ writes has (``emq_record`` in queue/lua/_lib.lua); an entry
without one is quarantined, so counting them among the quarantined finds them all."""

CRASH_POINTS = ("after_floor_commit", "during_upload", "before_manifest", "after_upload",
                "before_trim", "after_trim")
"""Where ``hook(name)`` is called; tests kill the driver at each to prove convergence."""


@dataclass(slots=True)
class FoldReport(ArchiveReport):
    """What one fold did. ``entries`` counts every new stream entry, quarantined included.

    ``pulled`` counts slices taken from the remote (another driver folded them),
    ``dropped`` this floor's unuploaded slices that another driver's replaced. A queue
    ``fold_declared`` left alone has ``skipped`` (why) and ``held_by`` (the driver
    holding its lease, when one does).

    Entries EchoMQ did not write: ``foreign`` counts those this fold took that lack
    a field it always writes (``job``, ``outcome``, ``attempts``, ``at``; quarantined,
    kept exactly), ``ahead`` those left in
    the stream because their ids are ahead of the server clock (never folded: see
    :mod:`echomq.archive.stream_checks`), ``set_aside`` those settles have moved to the
    queue's ``foreign`` list so far."""

    uploaded: int = 0
    pulled: int = 0
    dropped: int = 0
    trimmed: int = 0
    checkpoint: str = ZERO_ID
    seconds: float = 0.0
    error: str | None = None
    trim_refused: str | None = None
    skipped: str | None = None
    held_by: str | None = None
    foreign: int = 0
    ahead: int = 0
    set_aside: int = 0


class _Tally:
    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.counts = dict.fromkeys(("entries", "quarantined", "slices", "uploaded", "pulled",
                                     "dropped", "trimmed", "foreign", "ahead", "set_aside"), 0)
        self.started = time.perf_counter()
        self.trim_refused: str | None = None
        self.trimmed_through: str | None = None
        self.record_checked = False

    def freeze(self, checkpoint: str, error: str | None = None) -> FoldReport:
        return FoldReport(self.queue, **self.counts, checkpoint=checkpoint,  # type: ignore[arg-type]
                          seconds=time.perf_counter() - self.started, error=error,
                          trim_refused=self.trim_refused)


class Driver(StreamChecks, UploadSteps):
    """Folds declared outcome streams into a floor (and a remote, when given).

    ``slice_count`` and ``slice_bytes`` bound one slice (its object and its LMDB
    transaction). ``lease_ms`` is the fold lease; with ``wait_ms`` > 0 a held lease is
    waited for, otherwise :class:`~echomq.errors.LeaseHeld` is raised at once. ``name``
    says who holds a lease in other drivers' reports (default ``host:pid``).
    ``progress(queue, n)`` is told the entries each slice committed to the floor (the CLI
    draws a bar with it).

    ``claim_record`` says whether this driver claims a stream whose archive of record
    nobody declared, atomically inside its first fenced trim: ``None`` (default) claims
    for a remote and never for a floor alone (a floor-only driver then folds into its
    floor, trims nothing, marks nothing, and says so in ``trim_refused``); ``True``
    claims for the remote, else the floor; ``False`` never claims.
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
        name: str | None = None,
        progress: Callable[[str, int], None] | None = None,
        claim_record: bool | None = None,
    ) -> None:
        for what, value in (("slice_count", slice_count), ("slice_bytes", slice_bytes),
                            ("lease_ms", lease_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"{what} must be a positive integer, got {value!r}")
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
        self.progress = progress
        self.compress_level = compress_level
        self.name = check_driver_name(name) if name is not None else default_name()
        if claim_record is not None and not isinstance(claim_record, bool):
            raise InvalidArgument(f"claim_record must be True, False or None, got "
                                  f"{claim_record!r}")
        self.claim_record = remote is not None if claim_record is None else claim_record
        """Whether this driver claims an archive of record nobody declared."""
        self._lease_token = f"{self.name}/{uuid.uuid4().hex}"
        self._folding = threading.Lock()
        self._held: list[str] = []  # queues whose lease fold_declared keeps between passes
        self._renewed = time.monotonic()
        self.folding: str | None = None
        """The queue being folded now (for a hook, a log line)."""
        self._roster = Roster(conn, self.name, lease_ms)
        self._entry_bytes: dict[str, float | None] = {}  # mean line size per queue: pages
        self._refusals: set[tuple[str, str | None]] = set()  # trim refusals logged so far

    def close(self) -> None:
        """Give back the leases ``fold_declared`` kept, so other drivers take the queues
        at once, and leave the roster; then close the floor (when opened here)."""
        with suppress(*_REDIS_FAILED):
            for queue in list(self._held):
                self._let_go(queue)
            self._roster.leave()
        if self._owns_floor:
            self.floor.close()

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        return self._fold(queue, keep_lease=False, wait_ms=self.wait_ms)

    def _fold(self, queue: str, *, keep_lease: bool, wait_ms: int) -> FoldReport:
        """The fold; ``keep_lease`` keeps the lease after a fold that went through (it
        lapses on its own unless the next pass renews it)."""
        keys = self.conn.keys(queue)
        tally = _Tally(queue)
        try:
            with self._folding:
                self.folding = queue
                if not is_declared(self.conn, queue):
                    raise NotDeclared(f"the outcome stream of {queue!r} is not declared; "
                                      "declare it before archiving (it is never trimmed "
                                      "otherwise)")
                lease = FoldLease(self.redis, queue, self.lease_ms, wait_ms,
                                  token=self._lease_token, url=self.conn.url,
                                  prefix=self.conn.prefix).acquire()
                done = False
                try:
                    self._fold_slices(keys, queue, lease, tally)
                    done = True
                finally:
                    if not (done and keep_lease):
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
        report = tally.freeze(self.floor.checkpoint(queue))
        # for echomq_archive_last_fold_duration_seconds: the floor is what a scrape reads
        self.floor.record_fold(queue, report.seconds, int(time.time() * 1000))
        return report

    def _fold_slices(self, keys: Keys, queue: str, lease: FoldLease, tally: _Tally) -> None:
        """Repair what an earlier fold left (upload, trim), then fold slice by slice."""
        try:
            bound = self.clock_bound(keys)
            end = self._stream_end(keys, queue, bound)
            tally.counts["ahead"], tally.counts["set_aside"] = self.foreign_counts(keys, bound)
            self._mark(queue, lease, tally)  # repairs a mark an earlier fold did not record
            manifest = self._sync(queue, lease, tally) if self.remote is not None else None
            self._check_gap(keys, queue, lease)
            self._trim(queue, lease, tally)
            if self.remote is None:
                self._fold_to_floor(keys, queue, end, lease, tally)
            else:
                with ThreadPoolExecutor(1, thread_name_prefix="emq-upload") as uploader:
                    self._fold_and_upload(keys, queue, end, lease, tally, manifest, uploader)
        finally:
            if tally.trimmed_through is not None:  # for status only: once per fold
                with suppress(ArchiveError):  # never mask the fold's own error
                    self.floor.record_trim(queue, tally.trimmed_through)

    def _fold_to_floor(self, keys: Keys, queue: str, end: str | None, lease: FoldLease,
                       tally: _Tally) -> None:
        """Per slice: read, commit to the floor, mark, trim."""
        while end is not None:
            checkpoint = self.floor.checkpoint(queue)
            if not id_lt(checkpoint, end):
                break
            lease.renew()
            with quiet_gc():
                content = self._read_slice(keys, queue, checkpoint, end)
                self._check_gap(keys, queue, lease)  # after the read: it may have missed some
                if content is None:
                    break
                self._commit(content, tally)
            self._mark(queue, lease, tally)
            self._trim(queue, lease, tally)

    def _fold_and_upload(self, keys: Keys, queue: str, end: str | None, lease: FoldLease,
                         tally: _Tally, manifest: Manifest | None,
                         uploader: ThreadPoolExecutor) -> None:
        """Per slice: read, commit, mark, upload (manifest), trim; the upload of one slice
        runs on ``uploader`` while the next slice is read and encoded. The next slice is
        committed only once the upload before it stood (then that slice is trimmed), so a
        failed upload leaves exactly one slice pending, as without the overlap."""
        uploading: Future[Manifest | None] | None = None
        while True:
            checkpoint = self.floor.checkpoint(queue)
            content = None
            if end is not None and id_lt(checkpoint, end):
                lease.renew()
                with quiet_gc():
                    content = self._read_slice(keys, queue, checkpoint, end)
                    self._check_gap(keys, queue, lease)  # after the read: it may have missed some
            if uploading is not None:  # the slice before: uploaded and listed, so trimmed
                manifest = uploading.result()
                uploading = None
                self._trim(queue, lease, tally)
            if content is None:
                return
            with quiet_gc():
                self._commit(content, tally)
            self._mark(queue, lease, tally)
            uploading = uploader.submit(self._upload, content, manifest, lease, tally)

    def fold_declared(self) -> dict[str, FoldReport]:
        """Fold once every declared queue this driver may take, never waiting for a lease;
        a queue that fails is reported with ``error`` set (and logged) and the others
        still fold.

        Many drivers share the declared queues (see :mod:`echomq.archive.sharing`): this
        one keeps the leases of the queues it folds between passes, up to its fair share,
        and leaves alone (``skipped``, ``held_by``) a queue another driver holds, one past
        its share, and one whose archive of record it does not write (its folds there
        would be a private copy that never trims).
        """
        queues = declared_queues(self.conn)
        share = fair_share(len(queues), self.beat())
        self._renewed = time.monotonic()
        declared = set(queues)
        for queue in [q for q in self._held if q not in declared]:  # undeclared since
            self._let_go(queue)
        reports: dict[str, FoldReport] = {}
        for queue in self._order(queues):
            self._keep_held()
            mine = queue in self._held
            if not mine and len(self._held) >= share:
                reports[queue] = FoldReport(queue, skipped=(
                    f"this driver keeps its fair share, {share} of {len(queues)} queues"))
                continue
            keep = self._held.index(queue) < share if mine else True
            reports[queue] = self._fold_shared(queue, mine, keep)
        self._name_holders(reports)
        return reports

    def beat(self) -> int:
        """Count this driver among the live ones now (``fold_declared`` does it each
        pass); returns how many are alive. Drivers started together beat first, so none
        takes every queue in its first pass."""
        return self._roster.beat()

    def _fold_shared(self, queue: str, mine: bool, keep: bool) -> FoldReport:
        """One queue of ``fold_declared``: its report, the lease kept or given back."""
        try:
            reason = None if mine else self._not_ours(queue)
            if reason is not None:
                return FoldReport(queue, skipped=reason)
            report = self._fold(queue, keep_lease=keep, wait_ms=0)
        except LeaseHeld:
            self._forget(queue)
            return FoldReport(queue, skipped="another driver holds its fold lease")
        except (ArchiveError, *_REDIS_FAILED) as exc:
            self._forget(queue)
            log.warning("archive fold of %r failed: %s", queue, exc)
            if not isinstance(exc, ArchiveError):
                exc = StreamUnavailable(f"the Redis server failed before folding {queue!r}: "
                                        f"{exc}")
            return getattr(exc, "report", None) or FoldReport(queue, error=repr(exc))
        if keep and queue not in self._held:
            self._held.append(queue)
        elif not keep:
            self._forget(queue)
        return report

    def _keep_held(self) -> None:
        """Renew every kept lease and this driver's beat once a third of a lease has gone
        by, so a pass longer than the lease neither lets this driver's other queues lapse
        to other floors nor has the others count it gone."""
        now = time.monotonic()
        if now - self._renewed < self.lease_ms / 3000:
            return
        self._renewed = now
        with suppress(*_REDIS_FAILED):
            self.beat()
        for queue in list(self._held):
            try:
                FoldLease(self.redis, queue, self.lease_ms, token=self._lease_token,
                          url=self.conn.url, prefix=self.conn.prefix).renew()
            except LeaseLost:
                self._forget(queue)
            except _REDIS_FAILED:
                return  # the folds of this pass report the failure, queue by queue

    def _order(self, queues: list[str]) -> list[str]:
        """The queues this driver holds first (in the order it took them), then the
        others from a place of its own, so drivers started together try different ones."""
        held = [q for q in self._held if q in queues]
        others = [q for q in queues if q not in self._held]
        if others:
            start = zlib.crc32(self._lease_token.encode()) % len(others)
            others = others[start:] + others[:start]
        return held + others

    def _not_ours(self, queue: str) -> str | None:
        """Why this driver leaves ``queue`` to others: its archive of record is one this
        driver does not write (None: it may fold it)."""
        record = archive_of_record(self.conn, queue)
        if record is None or record in self._archives():
            return None
        if self.remote is None and record.startswith("floor:"):
            return (f"its archive of record is {record}, another driver's floor; a driver "
                    "without a remote cannot take a queue over from another floor "
                    "(give the drivers one shared remote)")
        return f"its archive of record is {record}, which this driver does not write"

    def lease_holder(self, queue: str) -> str | None:
        """The name of the driver holding ``queue``'s fold lease now (None: free, or a
        driver from before names were kept in the lease)."""
        token = self.redis.get(self.conn.keys(queue).archive_lease)
        return holder_name(None if token is None else str(token))

    def _name_holders(self, reports: dict[str, FoldReport]) -> None:
        """Fill ``held_by`` of the skipped queues from their lease tokens (one pipeline)."""
        skipped = [q for q, r in reports.items() if r.skipped is not None]
        if not skipped:
            return
        pipe = self.redis.pipeline(transaction=False)
        for queue in skipped:
            pipe.get(self.conn.keys(queue).archive_lease)
        with suppress(*_REDIS_FAILED):
            for queue, token in zip(skipped, pipe.execute(), strict=True):
                reports[queue].held_by = holder_name(token)

    def _let_go(self, queue: str) -> None:
        """Give back a lease ``fold_declared`` kept."""
        self._forget(queue)
        FoldLease(self.redis, queue, self.lease_ms, token=self._lease_token,
                  url=self.conn.url, prefix=self.conn.prefix).release()

    def _forget(self, queue: str) -> None:
        with suppress(ValueError):
            self._held.remove(queue)

    def _checkpoint_or_unknown(self, queue: str) -> str:
        """The checkpoint for a failure's report; a floor that fails to read is no reason
        to hide the first error."""
        try:
            return self.floor.checkpoint(queue)
        except ArchiveError:
            return "?"

    def _read_slice(self, keys: Keys, queue: str, after: str, end: str) -> SliceContent | None:
        items, self._entry_bytes[queue] = read_items(
            self.redis, keys.completions, after, end, count=self.slice_count,
            max_bytes=self.slice_bytes, entry_bytes=self._entry_bytes.get(queue),
            fast=self._raw)
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
            if added[1]:  # quarantined: foreign when it lacks a field EchoMQ always writes
                tally.counts["foreign"] += sum(1 for _, f, _ in content.items
                                               if not _OURS.issubset(f))
            if self.progress is not None:
                self.progress(content.meta.queue, added[0] + added[1])
        self._at("after_floor_commit")

    # -- the folded mark ------------------------------------------------------------------

    def _mark(self, queue: str, lease: FoldLease, tally: _Tally) -> None:
        """Tell Redis how far the floor holds the stream (the meta hash's ``folded``), so
        retention forgets a row only once its outcome is here. The floor commit is the
        line, not the upload: the floor is durable on disk, and the stream itself still
        keeps every entry until the remote has it too. Only the archive of record's
        driver marks (a copy elsewhere does not make forgetting safe); the lease fences it
        and it never moves backwards."""
        checkpoint = self.floor.checkpoint(queue)
        if checkpoint == ZERO_ID or not self._may_trim(queue, tally):
            return
        self.floor.check_in_place()
        writes, also = self._archives()
        try:
            lease.mark(checkpoint, writes, also, claim=self.claim_record)
        except NotArchiveOfRecord:
            self._refuse_trim(queue, tally, archive_of_record(self.conn, queue))

    # -- the trim -------------------------------------------------------------------------

    def _trim(self, queue: str, lease: FoldLease, tally: _Tally) -> None:
        safe = self.floor.safe_trim_point(queue, with_remote=self.remote is not None)
        if safe == ZERO_ID or not self._may_trim(queue, tally):
            return
        self.floor.check_in_place()
        self._at("before_trim")
        writes, also = self._archives()
        try:
            tally.counts["trimmed"] += lease.trim(id_after(safe), writes, also,
                                                  claim=self.claim_record)
        except NotArchiveOfRecord:
            self._refuse_trim(queue, tally, archive_of_record(self.conn, queue))
            return
        tally.trimmed_through = safe  # recorded in the floor once, as the fold ends
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
        the fenced trim checks again). Unset: the trim claims it, if this driver claims."""
        if not tally.record_checked:
            tally.record_checked = True
            record = archive_of_record(self.conn, queue)
            if (record is None and not self.claim_record) or (
                    record is not None and record not in self._archives()):
                self._refuse_trim(queue, tally, record)
        return tally.trim_refused is None

    def _refuse_trim(self, queue: str, tally: _Tally, record: str | None) -> None:
        writes = " and ".join(a for a in self._archives() if a)
        if record is None:
            tally.trim_refused = (
                f"no archive of record is declared for {queue!r}, and this driver does not "
                f"claim one for {writes} (only a driver with a remote claims it unasked), "
                "so it folds into its floor but never trims (nor marks the stream folded "
                "for retention); to make this floor the record: "
                f"`emq archive declare {queue} --record floor`, `emq archive fold "
                "--claim-record`, or Driver(..., claim_record=True)")
        else:
            tally.trim_refused = (
                f"the archive of record of {queue!r} is {record}; this driver writes "
                f"{writes}, so it folds into its floor but never trims (nor marks the "
                "stream folded for retention)")
        if (queue, record) not in self._refusals:  # once per driver: a pass each second
            self._refusals.add((queue, record))
            log.warning("archive: %s", tally.trim_refused)

    # -- gaps: entries lost before the floor took them ------------------------------------

    def acknowledge_gap(self, queue: str, by: str | None = None, note: str = "") -> list[Gap]:
        """Accept the open gaps of ``queue`` as lost so folds go on; returns them (empty:
        none was open). The acknowledgement is recorded in the floor with ``by``."""
        who = by or os.environ.get("USER") or "unknown"
        gaps = self.floor.acknowledge_gaps(queue, who, note)
        for gap in gaps:
            log.warning("archive: gap acknowledged: %s", gap.describe())
        return gaps


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
