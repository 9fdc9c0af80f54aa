"""The floor: the archive's local LMDB store, the copy audits read and restores rebuild.

A :class:`Floor` has an :class:`~echomq.archive.lmdbstore.LmdbStore` (one environment per
path per process, a map that grows, every failure a ``FloorError``) and, for each thing it
keeps, a module of functions run inside one of the store's transactions: the per-queue
state (``floor_state``), the slices and their entries (``floor_slices``, keyed by
``floor_rows``), the gap ledger (``floor_gaps``), the chain of uploaded digests
(``floor_chain``), the handover of a queue (``floor_rebase``), the format and its
migration (``floor_format``) and the reads for people (``floor_reads``). Its methods say
which transaction a step runs in; the functions say what it does there. Readers use
LMDB's MVCC snapshots and never block the writer.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import lmdb

from echomq.archive import (
    floor_chain,
    floor_format,
    floor_gaps,
    floor_reads,
    floor_rebase,
    floor_slices,
)
from echomq.archive import floor_state as state_of
from echomq.archive.entries import ArchivedEntry, Outcome, QuarantinedEntry
from echomq.archive.floor_gaps import Gap, GapBaseline
from echomq.archive.floor_reads import Audit, FloorStatus
from echomq.archive.floor_rows import DBS
from echomq.archive.lmdbstore import Dbs, LmdbStore, Txn
from echomq.archive.slices import SliceContent, SliceMeta
from echomq.errors import FloorError, FloorFull, FloorGap

if TYPE_CHECKING:
    from echomq.archive.history_sql import QueryResult
    from echomq.progress import Tick

DEFAULT_MAP_SIZE = 64 * 1024 * 1024
P = ParamSpec("P")
T = TypeVar("T")


class Floor:
    """The LMDB floor at ``path`` (a directory, created when missing).

    ``map_size`` is only the starting size: the map doubles whenever a commit needs more.
    Instances for the same path in one process share one environment.
    """

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE) -> None:
        self.store = LmdbStore(path, DBS, map_size)
        self.path = self.store.path
        try:
            floor_format.ensure(self.store)
        except BaseException:
            self.close()
            raise

    # -- the store ------------------------------------------------------------------------

    @property
    def env(self) -> lmdb.Environment:
        return self.store.env

    @property
    def grows(self) -> int:
        """How many times this instance grew the map."""
        return self.store.grows

    def check_in_place(self) -> None:
        self.store.check_in_place()  # raises when the data file was removed or replaced

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Floor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, fn: Callable[Concatenate[Txn, Dbs, P], T], *args: P.args,
              **kwargs: P.kwargs) -> T:
        """``fn(txn, dbs, ...)`` in one read snapshot."""
        with self.store.read() as (txn, dbs):
            return fn(txn, dbs, *args, **kwargs)

    def _write(self, fn: Callable[Concatenate[Txn, Dbs, P], T], *args: P.args,
               **kwargs: P.kwargs) -> T:
        """``fn(txn, dbs, ...)`` in one write transaction (run again if the map grew)."""
        return self.store.write(lambda txn, dbs: fn(txn, dbs, *args, **kwargs))

    def _state(self, queue: str) -> dict[str, Any]:
        return self._read(state_of.load, queue)

    # -- writes ---------------------------------------------------------------------------

    def commit_slice(self, content: SliceContent, *, uploaded: bool, keep_bytes: bool = True
                     ) -> tuple[int, int] | None:
        """Commit a slice and advance the checkpoint to its last id, in one transaction;
        how many entries and quarantined entries are new (``None``: at or below the
        checkpoint, nothing written; after it, a :class:`FloorGap`). ``uploaded=False``
        queues it for upload, its bytes kept when ``keep_bytes`` (else rebuilt)."""
        return self._write(floor_slices.commit, content=content, uploaded=uploaded,
                           keep_bytes=keep_bytes)

    def commit_slices(self, contents: Sequence[SliceContent], *, uploaded: bool
                      ) -> list[tuple[int, int] | None]:
        """:meth:`commit_slice` for each of ``contents`` in order, all in one transaction:
        a restore of many small slices pays one synced commit for the lot, not one each."""
        return self._write(floor_slices.commit_all, contents=contents, uploaded=uploaded)

    def drop_through(self, queue: str, through: str, *, digest: str = "",
                     accounted: int | None = None, batch: int = 20_000
                     ) -> tuple[int, int, int]:
        """Forget ``queue``'s slices that end at or before ``through`` (a slice boundary);
        returns (slices, entries, quarantined) forgotten. ``digest`` is the last dropped
        slice's, what the next slice chains from; a floor behind ``through`` starts there,
        with ``accounted`` entries (unknown when None). Entries go ``batch`` at a time, one
        transaction each, so a rerun finishes an interrupted drop."""
        return floor_slices.drop_through(self.store, queue, through, digest=digest,
                                          accounted=accounted, batch=batch)

    def mark_uploaded(self, meta: SliceMeta, *, keep_digest: bool = False) -> None:
        """The slice is in the remote: drop its kept bytes and flag its record (with
        ``keep_digest``, :meth:`keep_digest` too, in the same transaction)."""
        self._write(floor_slices.mark_uploaded, meta=meta, keep_digest=keep_digest)

    def keep_digest(self, meta: SliceMeta) -> None:
        """Record the checksums and chain digests of the slice as it was uploaded (a slice
        folded without a remote has none until then)."""
        self._write(floor_chain.update_record, meta=meta, digests=True)

    def drop_pending(self, queue: str) -> int:
        """Forget ``queue``'s slices not yet uploaded (a handover: only the lease holder
        calls it, see :mod:`~echomq.archive.floor_rebase`); returns how many went."""
        return self._write(floor_rebase.drop_pending, queue=queue)

    def record_trim(self, queue: str, through: str) -> None:
        """Remember that the stream was trimmed through ``through`` (for status only)."""
        self._write(state_of.note_trim, queue=queue, through=through)

    def record_fold(self, queue: str, seconds: float, at_ms: int) -> None:
        """Remember how long the last completed fold of ``queue`` took (read by metrics)."""
        self._write(state_of.note_fold, queue=queue, seconds=seconds, at_ms=at_ms)

    def anchor_accounted(self, queue: str, checkpoint: str, accounted: int) -> None:
        """Set an unknown count, measured by the driver while the checkpoint held still."""
        self._write(floor_gaps.anchor, queue=queue, checkpoint=checkpoint, accounted=accounted)

    def record_gap(self, queue: str, after: str, upto: str, count: int | None) -> Gap:
        """Remember a loss found by a fold (an open gap at the same checkpoint is updated)."""
        return self._write(floor_gaps.record, queue=queue, after=after, upto=upto, count=count)

    def acknowledge_gaps(self, queue: str, by: str, note: str = "") -> list[Gap]:
        """Accept every open gap of ``queue`` as lost, so folds go on; returns them (see
        :func:`~echomq.archive.floor_gaps.acknowledge`)."""
        return self._write(floor_gaps.acknowledge, queue=queue, by=by, note=note)

    # -- reads for the driver -------------------------------------------------------------

    def checkpoint(self, queue: str) -> str:
        """The last stream id folded into the floor (``0-0`` before the first)."""
        return str(self._state(queue)["checkpoint"])

    def base(self, queue: str) -> tuple[str, str]:
        """(through, digest) of what a prune forgot: the floor's history starts after it
        (``0-0`` before any prune)."""
        return state_of.base(self._state(queue))

    def last_fold(self, queue: str) -> tuple[float, int] | None:
        """(seconds, finished at in ms) of the last completed fold, or ``None`` before one."""
        return state_of.last_fold(self._state(queue))

    def gap_baseline(self, queue: str) -> GapBaseline:
        return floor_gaps.baseline(self._state(queue))

    def gaps(self, queue: str) -> list[Gap]:
        """Every loss recorded for ``queue``, acknowledged or not, oldest first."""
        return floor_gaps.listed(self._state(queue), queue)

    def slices(self, queue: str, *, pending_only: bool = False) -> list[SliceMeta]:
        """The queue's slice records in history order (or only those not yet uploaded)."""
        return self._read(floor_slices.records, queue, pending_only=pending_only)

    def pending_slices(self, queue: str) -> list[SliceMeta]:
        return self.slices(queue, pending_only=True)

    def uploaded_slices(self, queue: str) -> list[SliceMeta]:
        """The slices this floor uploaded or restored, with their digests, in order."""
        return self._read(floor_chain.uploaded_slices, queue)

    def last_digest(self, queue: str) -> str:
        """The digest the queue's next slice chains from (``""``, the genesis, before the
        first)."""
        return self._read(floor_chain.last_digest, queue)

    def digest_before(self, meta: SliceMeta) -> str:
        """The digest of the slice that ends at ``meta.prev`` (``""`` if unknown)."""
        return self._read(floor_chain.digest_before, meta)

    def safe_trim_point(self, queue: str, *, with_remote: bool) -> str:
        """The last id held by the floor and, ``with_remote``, already uploaded too."""
        return self._read(floor_slices.safe_trim_point, queue, with_remote=with_remote)

    def slice_bytes(self, meta: SliceMeta) -> bytes:
        """A pending slice's object bytes: the kept copy, or rebuilt from the floor."""
        return floor_slices.slice_bytes(self.store, meta)

    def format_version(self) -> int:
        """The format this floor is written in (see :mod:`~echomq.archive.floor_format`)."""
        return self._read(floor_format.version)

    # -- reads for people -----------------------------------------------------------------

    def queues(self) -> list[str]:
        return self._read(floor_reads.queue_names)

    def status(self, queue: str) -> FloorStatus:
        return self._read(floor_reads.status, queue)

    def lines(self, queue: str) -> Iterator[bytes]:
        """Every archived entry of ``queue`` as its stored line, in stream order, read in
        one transaction (the SQL view streams these; malformed entries are quarantined
        elsewhere, so every line parses)."""
        with self.store.read() as (txn, dbs):
            yield from floor_reads.lines(txn, dbs, queue)

    def query(self, sql: str, *, external_access: bool = False,
              progress: Tick | None = None) -> QueryResult:
        """Run ``sql`` (DuckDB) over the view ``outcomes`` of every queue in the floor, locked
        down unless ``external_access=True`` (:func:`echomq.archive.history_sql.query`)."""
        from echomq.archive.history_sql import query

        return query(self, sql, external_access=external_access, progress=progress)

    def export(self, queue: str, path: str | os.PathLike[str], format: str = "parquet",
               since: int | datetime | None = None, until: int | datetime | None = None,
               progress: Tick | None = None) -> int:
        """Write ``queue``'s outcomes settled at ``since <= at < until`` to ``path`` (Parquet
        or JSON lines: :func:`echomq.archive.history_sql.export`); returns the count."""
        from echomq.archive.history_sql import export

        return export(self, queue, path, format, since, until, progress)

    def entries(self, queue: str) -> list[ArchivedEntry]:
        """Every archived outcome of ``queue`` in stream order."""
        return self._read(floor_reads.archived, queue)

    def quarantined(self, queue: str) -> list[QuarantinedEntry]:
        """Malformed entries kept verbatim, in stream order."""
        return self._read(floor_reads.quarantined, queue)

    def history(self, queue: str, job_id: str, *, offset: int = 0,
                limit: int | None = None) -> list[ArchivedEntry]:
        """Every archived outcome of one job, oldest first (``limit`` of them from the
        ``offset``-th: a page, for a job run thousands of times)."""
        return self._read(floor_reads.history, queue, job_id, offset, limit)

    def audit(self, queue: str, outcome: Outcome | str | None = None,
              since: int | datetime | None = None, until: int | datetime | None = None,
              limit: int | None = None) -> Audit:
        """Outcomes settled at ``since <= at < until`` (ms or datetimes), oldest first.

        The list's ``gaps`` are the queue's known losses (see :func:`floor_reads.audit`)."""
        return self._read(floor_reads.audit, queue, outcome, since, until, limit)

    def export_jsonl(self, queue: str, out: IO[str], outcome: Outcome | str | None = None,
                     since: int | datetime | None = None, until: int | datetime | None = None,
                     *, quarantine: bool = False) -> int:
        """Write an audit as JSON lines (plus the quarantine when asked); returns the count."""
        return self._read(floor_reads.export_jsonl, queue, out, outcome, since, until,
                          quarantine=quarantine)

    def digest(self, queue: str) -> str:
        """sha256 over every entry and quarantined line: equal floors give equal digests."""
        return self._read(floor_reads.digest, queue)

    def size_bytes(self) -> int:
        """Bytes of the map in use (pages written), for the benchmark's per-entry figure."""
        return self.store.used_bytes()

    # -- identity -------------------------------------------------------------------------

    def record_address(self) -> str:
        """How a declaration names this floor as an archive of record."""
        return f"floor:{self.identity()}"

    def identity(self) -> str:
        """This floor's own id (made once, kept in the floor): how an archive of record
        names a floor, wherever its directory is mounted."""
        return floor_format.identity(self.store)


__all__ = ["Audit", "Floor", "FloorError", "FloorFull", "FloorGap", "FloorStatus", "Gap",
           "GapBaseline"]
