"""The fold driver: a long-lived folder of declared outcome streams into a floor (and a
remote, when given), one queue at a time.

A :class:`Driver` keeps what outlives one fold: its floor and remote, its name and lease
token, its :class:`~echomq.archive.custody.Custody` of the archive of record (whether its
folds may mark and trim) and its :class:`~echomq.archive.sharing.Share` of the declared
queues among many drivers. Each fold runs as a :class:`~echomq.archive.fold.Fold` (the
order of its steps: read, commit, mark, upload, trim) holding that fold's state, and ends
as one frozen :class:`~echomq.archive.report.FoldReport`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import suppress

import redis

from echomq.archive.custody import Custody
from echomq.archive.floor import Floor
from echomq.archive.floor_gaps import Gap
from echomq.archive.fold import Fold, FoldSetup
from echomq.archive.fold_lease import FoldLease
from echomq.archive.remote import Remote
from echomq.archive.report import FoldReport, Tally
from echomq.archive.sharing import (
    REDIS_FAILED,
    Roster,
    Share,
    check_driver_name,
    default_name,
    holder_name,
)
from echomq.errors import ArchiveError, InvalidArgument, NotDeclared, StreamUnavailable
from echomq.queue.connection import Connection
from echomq.queue.declared import declared_queues, is_declared

log = logging.getLogger(__name__)

CRASH_POINTS = ("after_floor_commit", "during_upload", "before_manifest", "after_upload",
                "before_trim", "after_trim")
"""Where ``hook(name)`` is called; tests kill the driver at each to prove convergence."""


class Driver:
    """Folds declared outcome streams into a floor (and a remote, when given).

    ``slice_count`` and ``slice_bytes`` bound one slice (its object and its LMDB
    transaction). ``lease_ms`` is the fold lease; with ``wait_ms`` > 0 a held lease is
    waited for, otherwise :class:`~echomq.errors.LeaseHeld` is raised at once. ``name``
    says who holds a lease in other drivers' reports (default ``host:pid``).
    ``progress(queue, n)`` is told the entries each slice committed to the floor (the CLI
    draws a bar with it).

    ``claim_custody`` says whether this driver claims custody of a stream whose custodian
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
        claim_custody: bool | None = None,
    ) -> None:
        for what, value in (("slice_count", slice_count), ("slice_bytes", slice_bytes),
                            ("lease_ms", lease_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgument(f"{what} must be a positive integer, got {value!r}")
        if claim_custody is not None and not isinstance(claim_custody, bool):
            raise InvalidArgument(f"claim_custody must be True, False or None, got "
                                  f"{claim_custody!r}")
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
        self._custody = Custody(conn, self.floor, remote,
                                remote is not None if claim_custody is None else claim_custody)
        self._lease_token = f"{self.name}/{uuid.uuid4().hex}"
        self._folding = threading.Lock()
        self.folding: str | None = None
        """The queue being folded now (for a hook, a log line)."""
        self._entry_bytes: dict[str, float | None] = {}  # mean line size per queue: pages
        self._share = Share(conn, Roster(conn, self.name, lease_ms), lease_ms,
                            self._lease_token, self._lease,
                            lambda queue, keep: self._fold(queue, keep_lease=keep, wait_ms=0),
                            self._custody.not_ours)

    @property
    def claim_custody(self) -> bool:
        """Whether this driver claims custody of a stream whose custodian nobody declared."""
        return self._custody.claim

    def close(self) -> None:
        """Give back the leases ``fold_declared`` kept, so other drivers take the queues
        at once, and leave the roster; then close the floor (when opened here)."""
        self._share.leave()
        if self._owns_floor:
            self.floor.close()

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one queue --------------------------------------------------------------------------

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
        tally = Tally(queue)
        try:
            with self._folding:
                self.folding = queue
                if not is_declared(self.conn, queue):
                    raise NotDeclared(f"the outcome stream of {queue!r} is not declared; "
                                      "declare it before archiving (it is never trimmed "
                                      "otherwise)")
                lease = self._lease(queue, wait_ms).acquire()
                done = False
                try:
                    Fold(self._setup(), queue, lease, tally).run()
                    done = True
                finally:
                    if not (done and keep_lease):
                        with suppress(*REDIS_FAILED):  # never mask the fold's own error
                            lease.release()
        except REDIS_FAILED as exc:
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

    def _setup(self) -> FoldSetup:
        """What the next fold takes from this driver (read at each fold's start)."""
        return FoldSetup(self.conn, self.floor, self.remote, self._custody, self._raw,
                         self.slice_count, self.slice_bytes, self.compress_level,
                         self.hook, self.progress, self._entry_bytes)

    def _lease(self, queue: str, wait_ms: int = 0) -> FoldLease:
        """This driver's fold lease of ``queue`` (not acquired): one token for all."""
        return FoldLease(self.conn, queue, self.lease_ms, wait_ms, token=self._lease_token)

    def _checkpoint_or_unknown(self, queue: str) -> str:
        """The checkpoint for a failure's report; a floor that fails to read is no reason
        to hide the first error."""
        try:
            return self.floor.checkpoint(queue)
        except ArchiveError:
            return "?"

    # -- every declared queue, shared with other drivers -----------------------------------

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
        return self._share.run()

    def heartbeat(self) -> int:
        """Count this driver among the live ones now (``fold_declared`` does it each
        pass); returns how many are alive. Drivers started together send a heartbeat
        first, so none takes every queue in its first pass."""
        return self._share.roster.heartbeat()

    def lease_holder(self, queue: str) -> str | None:
        """The name of the driver holding ``queue``'s fold lease now (None: free, or a
        driver from before names were kept in the lease)."""
        token = self.redis.get(self.conn.keys(queue).archive_lease)
        return holder_name(None if token is None else str(token))

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
