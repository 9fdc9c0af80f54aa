"""The floor: the archive's local LMDB store, the copy audits read and restores rebuild.

One write transaction commits a whole slice (entries, indexes, quarantine, the slice
record and the checkpoint advance), so a crash, even ``kill -9``, leaves either all of a
slice or none of it. Commits are idempotent: a slice at or below the checkpoint is a
no-op, and an entry already present is not counted twice. Readers use LMDB's MVCC
snapshots and never block the writer. A full map is grown and the transaction retried.

Keys start with ``queue + NUL`` (queue names never contain control characters), then
16-byte stream ids whose byte order is stream order (see ``entries.id_key``).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, cast

from echomq.archive.entries import (
    ArchivedEntry,
    Outcome,
    QuarantinedEntry,
    id_from_key,
    id_key,
    id_lt,
    index_terms,
    parse_entry,
    parse_line,
    to_ms,
    write_jsonl,
)
from echomq.archive.floor_chain import DigestChain
from echomq.archive.floor_gaps import Gap as Gap
from echomq.archive.floor_gaps import GapBaseline as GapBaseline
from echomq.archive.floor_gaps import GapLedger, _gap
from echomq.archive.floor_rebase import PendingRebase
from echomq.archive.floor_state import _qk
from echomq.archive.lmdbstore import Dbs, FloorError, FloorFull, Txn
from echomq.archive.slices import RawItem, SliceContent, SliceMeta, build_slice
from echomq.errors import ChecksumMismatch
from echomq.errors import FloorGap as FloorGap

if TYPE_CHECKING:
    from echomq.archive.history_sql import QueryResult

DEFAULT_MAP_SIZE = 64 * 1024 * 1024
_DBS = ("entries", "by_job", "by_outcome", "by_time", "quarantine", "slices", "pending",
        "queues")


_IDENTITY_KEY = b"\x00floor-id"  # in "queues": no queue name holds a NUL, none sorts first


class Audit(list[ArchivedEntry]):
    """An audit's entries, with the queue's gaps: history the floor knows it lacks."""

    gaps: tuple[Gap, ...] = ()


@dataclass(frozen=True, slots=True)
class FloorStatus:
    """What the floor holds for one queue."""

    queue: str
    checkpoint: str
    entries: int
    quarantined: int
    slices: int
    pending: int
    trimmed_through: str
    oldest_at: int | None
    newest_at: int | None
    gaps: int = 0
    gaps_acknowledged: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


_U64 = struct.Struct(">Q").pack


def _u64(value: int) -> bytes:
    return _U64(value)


def _index_rows(qk: bytes, items: Sequence[RawItem]) -> dict[str, list[tuple[bytes, bytes]]]:
    """The key/value pairs a slice adds to each sub-database.

    The fold's hot loop: one tuple per index per entry, keys built from shared parts.
    """
    rows: dict[str, list[tuple[bytes, bytes]]] = {
        "entries": [], "by_job": [], "by_outcome": [], "by_time": [], "quarantine": []
    }
    add_entry, add_job = rows["entries"].append, rows["by_job"].append
    add_outcome, add_time = rows["by_outcome"].append, rows["by_time"].append
    add_bad = rows["quarantine"].append
    outcome_prefix = {o.value: qk + o.value.encode() + b"\x00" for o in Outcome}
    for sid, fields, line in items:
        ik = id_key(sid)
        terms = index_terms(fields)
        if isinstance(terms, str):
            add_bad((qk + ik, line))
            continue
        job, outcome, at_ms = terms
        at = _U64(at_ms)
        add_entry((qk + ik, line))
        add_job((qk + job.encode() + b"\x00" + ik, b""))
        add_outcome((outcome_prefix[outcome] + at + ik, b""))
        add_time((qk + at + ik, b""))
    return rows


class Floor(GapLedger, DigestChain, PendingRebase):
    """The LMDB floor at ``path`` (a directory, created when missing).

    ``map_size`` is only the starting size: the map doubles whenever a commit needs more.
    Instances for the same path in one process share one environment.
    """

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE) -> None:
        super().__init__(path, _DBS, map_size)

    # -- writes ---------------------------------------------------------------------------

    def commit_slice(self, content: SliceContent, *, uploaded: bool, keep_bytes: bool = True
                     ) -> tuple[int, int] | None:
        """Commit a slice and advance the checkpoint to its last id, in one transaction.

        Returns how many entries and quarantined entries are new, or ``None`` (and writes
        nothing) when the slice is at or below the checkpoint. A slice that starts after
        the checkpoint would leave a hole and is refused with :class:`FloorGap`.
        ``uploaded=False`` queues it for upload, keeping its bytes when ``keep_bytes``
        (otherwise they are rebuilt from the entries).
        """
        meta = content.meta
        qk = _qk(meta.queue)

        def txn_fn(txn: Txn, dbs: Dbs) -> tuple[int, int] | None:
            state = self._state(txn, dbs, meta.queue)
            checkpoint = state["checkpoint"]
            if not id_lt(checkpoint, meta.last):
                return None
            if id_lt(checkpoint, meta.prev):
                raise FloorGap(f"{meta.name}: starts after {meta.prev} but the floor's "
                               f"checkpoint for {meta.queue!r} is {checkpoint}")
            items = content.items
            if not id_lt(checkpoint, meta.first):  # overlapping the checkpoint: skip the old
                items = [i for i in items if id_lt(checkpoint, i[0])]
            rows = _index_rows(qk, items)
            added = {"entries": 0, "quarantine": 0}
            for name, pairs in rows.items():
                if pairs:
                    _, new = txn.cursor(db=dbs[name]).putmulti(pairs, overwrite=False)
                    added[name] = new
            state["entries"] += added["entries"]
            state["quarantined"] += added["quarantine"]
            if state["accounted"] is not None:
                state["accounted"] += len(items)
            record = dict(meta.to_json(), uploaded=uploaded)
            txn.put(qk + id_key(meta.first), json.dumps(record).encode(), db=dbs["slices"])
            if not uploaded:
                data = content.data if keep_bytes else b""
                txn.put(qk + id_key(meta.first), data, db=dbs["pending"])
                state["pending"] += 1
            state["slices"] += 1
            state["checkpoint"] = meta.last
            self._save(txn, dbs, meta.queue, state)
            return added["entries"], added["quarantine"]

        return self._write(txn_fn)

    def mark_uploaded(self, meta: SliceMeta) -> None:
        """The slice is in the remote: drop its kept bytes and flag its record."""
        qk = _qk(meta.queue)
        key = qk + id_key(meta.first)

        def txn_fn(txn: Txn, dbs: Dbs) -> None:
            if not txn.delete(key, db=dbs["pending"]):
                return
            raw = txn.get(key, db=dbs["slices"])
            if raw is not None:
                record = json.loads(cast(bytes, raw))
                record["uploaded"] = True
                txn.put(key, json.dumps(record).encode(), db=dbs["slices"])
            state = self._state(txn, dbs, meta.queue)
            state["pending"] -= 1
            self._save(txn, dbs, meta.queue, state)

        self._write(txn_fn)

    def record_trim(self, queue: str, through: str) -> None:
        """Remember that the stream was trimmed through ``through`` (for status only)."""
        def txn_fn(txn: Txn, dbs: Dbs) -> None:
            state = self._state(txn, dbs, queue)
            if id_lt(state["trimmed_through"], through):
                state["trimmed_through"] = through
                self._save(txn, dbs, queue, state)

        self._write(txn_fn)

    def record_fold(self, queue: str, seconds: float, at_ms: int) -> None:
        """Remember how long the last completed fold of ``queue`` took (read by metrics)."""
        def txn_fn(txn: Txn, dbs: Dbs) -> None:
            state = self._state(txn, dbs, queue)
            state["last_fold"] = {"seconds": seconds, "at": at_ms}
            self._save(txn, dbs, queue, state)

        self._write(txn_fn)

    def last_fold(self, queue: str) -> tuple[float, int] | None:
        """(seconds, finished at in ms) of the last completed fold, or ``None`` before one."""
        with self._read() as (txn, dbs):
            found = self._state(txn, dbs, queue).get("last_fold")
        return None if found is None else (float(found["seconds"]), int(found["at"]))

    # -- reads for the driver -------------------------------------------------------------

    def checkpoint(self, queue: str) -> str:
        """The last stream id folded into the floor (``0-0`` before the first)."""
        with self._read() as (txn, dbs):
            return str(self._state(txn, dbs, queue)["checkpoint"])

    def slices(self, queue: str, *, pending_only: bool = False) -> list[SliceMeta]:
        """The queue's slice records in history order (or only those not yet uploaded)."""
        qk = _qk(queue)
        with self._read() as (txn, dbs):
            db = dbs["pending" if pending_only else "slices"]
            return [SliceMeta.from_json(json.loads(
                    self._get(txn, dbs["slices"], key) if pending_only else value))
                    for key, value in self._scan(txn, db, qk)]

    def pending_slices(self, queue: str) -> list[SliceMeta]:
        return self.slices(queue, pending_only=True)

    def safe_trim_point(self, queue: str, *, with_remote: bool) -> str:
        """The last id held by the floor and, ``with_remote``, already uploaded too."""
        with self._read() as (txn, dbs):
            checkpoint = str(self._state(txn, dbs, queue)["checkpoint"])
            if not with_remote:
                return checkpoint
            for key, _ in self._scan(txn, dbs["pending"], _qk(queue)):
                return SliceMeta.from_json(json.loads(self._get(txn, dbs["slices"], key))).prev
            return checkpoint

    def slice_bytes(self, meta: SliceMeta) -> bytes:
        """A pending slice's object bytes: the kept copy, or rebuilt from the floor."""
        qk = _qk(meta.queue)
        lo, hi = qk + id_key(meta.first), qk + id_key(meta.last)
        items: list[RawItem] = []
        with self._read() as (txn, dbs):
            data = txn.get(lo, db=dbs["pending"])
            if data:
                return bytes(data)
            for name in ("entries", "quarantine"):
                for key, line in self._scan(txn, dbs[name], qk, lo):
                    if key > hi:
                        break
                    sid, fields = parse_line(line)
                    items.append((sid, fields, line))
        items.sort(key=lambda i: id_key(i[0]))
        rebuilt = build_slice(meta.queue, meta.prev, items,
                              prev_digest=meta.prev_digest or self.digest_before(meta))
        # Another zlib or level may compress differently: the same entries are the same slice.
        if rebuilt.meta.count != meta.count:
            raise ChecksumMismatch(f"{meta.name}: cannot rebuild from the floor "
                                   f"({rebuilt.meta.count} of {meta.count} entries)")
        return rebuilt.data

    # -- reads for people -----------------------------------------------------------------

    def queues(self) -> list[str]:
        with self._read() as (txn, dbs):
            return [k.decode() for k, _ in self._scan(txn, dbs["queues"], b"")
                    if k != _IDENTITY_KEY]

    def status(self, queue: str) -> FloorStatus:
        qk = _qk(queue)
        with self._read() as (txn, dbs):
            state = self._state(txn, dbs, queue)
            oldest = newest = None
            for key, _ in self._scan(txn, dbs["by_time"], qk):
                oldest = int.from_bytes(key[len(qk):len(qk) + 8], "big")
                break
            if oldest is not None:
                cur = txn.cursor(db=dbs["by_time"])
                if cur.set_range(qk[:-1] + b"\x01"):  # the first key after this queue's
                    cur.prev()
                else:
                    cur.last()
                newest = int.from_bytes(cast(bytes, cur.key())[len(qk):len(qk) + 8], "big")
        gaps = [_gap(queue, g) for g in state.get("gaps", ())]
        return FloorStatus(queue, state["checkpoint"], state["entries"], state["quarantined"],
                           state["slices"], state["pending"], state["trimmed_through"],
                           oldest, newest, sum(not g.acknowledged for g in gaps),
                           sum(g.acknowledged for g in gaps))

    def _entry(self, txn: Txn, dbs: Dbs, queue: str, key: bytes
               ) -> ArchivedEntry:
        sid, fields = parse_line(self._get(txn, dbs["entries"], _qk(queue) + key))
        item = parse_entry(queue, sid, fields)
        assert isinstance(item, ArchivedEntry)
        return item

    def _lines(self, queue: str, db: str) -> list[ArchivedEntry | QuarantinedEntry]:
        with self._read() as (txn, dbs):
            return [parse_entry(queue, *parse_line(line))
                    for _, line in self._scan(txn, dbs[db], _qk(queue))]

    def lines(self, queue: str) -> Iterator[bytes]:
        """Every archived entry of ``queue`` as its stored line, in stream order, read in
        one transaction (the SQL view streams these; malformed entries are quarantined
        elsewhere, so every line parses)."""
        with self._read() as (txn, dbs):
            for _, line in self._scan(txn, dbs["entries"], _qk(queue)):
                yield line

    def query(self, sql: str) -> QueryResult:
        """Run ``sql`` (DuckDB) over the view ``outcomes`` of every queue in the floor:
        queue, job_id, outcome, result, attempts, at, created_at, started_at (timestamps,
        UTC), error (a dead outcome's result), name and payload (when recorded), stream_id.
        Needs the extra ``echomq[sql]``."""
        from echomq.archive.history_sql import query

        return query(self, sql)

    def export(self, queue: str, path: str | os.PathLike[str], format: str = "parquet",
               since: int | datetime | None = None, until: int | datetime | None = None
               ) -> int:
        """Write ``queue``'s outcomes settled at ``since <= at < until`` to ``path``, as
        Parquet or JSON lines (the view's columns), for a warehouse; returns the count.
        Needs the extra ``echomq[sql]``."""
        from echomq.archive.history_sql import export

        return export(self, queue, path, format, since, until)

    def entries(self, queue: str) -> list[ArchivedEntry]:
        """Every archived outcome of ``queue`` in stream order."""
        return [e for e in self._lines(queue, "entries") if isinstance(e, ArchivedEntry)]

    def history(self, queue: str, job_id: str) -> list[ArchivedEntry]:
        """Every archived outcome of one job, oldest first."""
        prefix = _qk(queue) + job_id.encode() + b"\x00"
        with self._read() as (txn, dbs):
            keys = [key[len(prefix):] for key, _ in self._scan(txn, dbs["by_job"], prefix)]
            return [self._entry(txn, dbs, queue, k) for k in keys]

    def audit(self, queue: str, outcome: Outcome | str | None = None,
              since: int | datetime | None = None, until: int | datetime | None = None,
              limit: int | None = None) -> Audit:
        """Outcomes settled at ``since <= at < until`` (ms or datetimes), oldest first.

        The list's ``gaps`` are the queue's known losses, so an audit never reads as
        complete when the floor knows it is not."""
        lo, hi = to_ms(since), to_ms(until)
        prefix = _qk(queue)
        if outcome is not None:
            prefix += Outcome(outcome).value.encode() + b"\x00"
        db = "by_time" if outcome is None else "by_outcome"
        out = Audit()
        out.gaps = tuple(self.gaps(queue))
        with self._read() as (txn, dbs):
            for key, _ in self._scan(txn, dbs[db], prefix, prefix + _u64(max(lo or 0, 0))):
                if limit is not None and len(out) >= limit:
                    break
                at = int.from_bytes(key[len(prefix):len(prefix) + 8], "big")
                if hi is not None and at >= hi:
                    break
                out.append(self._entry(txn, dbs, queue, key[len(prefix) + 8:]))
        return out

    def quarantined(self, queue: str) -> list[QuarantinedEntry]:
        """Malformed entries kept verbatim, in stream order."""
        return [e for e in self._lines(queue, "quarantine") if isinstance(e, QuarantinedEntry)]

    def export_jsonl(self, queue: str, out: IO[str], outcome: Outcome | str | None = None,
                     since: int | datetime | None = None, until: int | datetime | None = None,
                     *, quarantine: bool = False) -> int:
        """Write an audit as JSON lines (plus the quarantine when asked); returns the count."""
        count = write_jsonl(self.audit(queue, outcome, since, until), out)
        if quarantine:
            count += write_jsonl(self.quarantined(queue), out)
        return count

    def digest(self, queue: str) -> str:
        """sha256 over every entry and quarantined line: equal floors give equal digests."""
        qk = _qk(queue)
        h = hashlib.sha256()
        with self._read() as (txn, dbs):
            for name in ("entries", "quarantine"):
                for key, line in self._scan(txn, dbs[name], qk):
                    h.update(name.encode() + id_from_key(key[len(qk):]).encode() + line)
        return h.hexdigest()

    def size_bytes(self) -> int:
        """Bytes of the map in use (pages written), for the benchmark's per-entry figure."""
        info, stat = self.env.info(), self.env.stat()
        return int((info["last_pgno"] + 1) * stat["psize"])

    # -- identity -------------------------------------------------------------------------

    def record_address(self) -> str:
        """How a declaration names this floor as an archive of record."""
        return f"floor:{self.identity()}"

    def identity(self) -> str:
        """This floor's own id (made once, kept in the floor): how an archive of record
        names a floor, wherever its directory is mounted."""
        with self._read() as (txn, dbs):
            raw = txn.get(_IDENTITY_KEY, db=dbs["queues"])
        if raw is not None:
            return bytes(raw).decode()

        def txn_fn(txn: Txn, dbs: Dbs) -> str:
            txn.put(_IDENTITY_KEY, uuid.uuid4().hex.encode(), db=dbs["queues"],
                    overwrite=False)
            return bytes(cast(bytes, txn.get(_IDENTITY_KEY, db=dbs["queues"]))).decode()

        return self._write(txn_fn)


__all__ = ["Audit", "Floor", "FloorError", "FloorFull", "FloorGap", "FloorStatus", "Gap",
           "GapBaseline"]
