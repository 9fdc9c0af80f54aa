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
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, cast

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
from echomq.archive.lmdbstore import Dbs, FloorError, FloorFull, LmdbStore, Txn
from echomq.archive.slices import ZERO_ID, RawItem, SliceContent, SliceMeta, build_slice
from echomq.errors import ChecksumMismatch
from echomq.errors import FloorGap as FloorGap
from echomq.queue.keys import check_name

DEFAULT_MAP_SIZE = 64 * 1024 * 1024
_DBS = ("entries", "by_job", "by_outcome", "by_time", "quarantine", "slices", "pending",
        "queues")


_IDENTITY_KEY = b"\x00floor-id"  # in "queues": no queue name holds a NUL, none sorts first


@dataclass(frozen=True, slots=True)
class Gap:
    """Stream entries lost before the floor took them: ids in ``(after, upto]``.

    ``after`` is the floor's checkpoint when the loss was found; ``upto`` bounds the lost
    ids from above (every lost id is at most it); ``count`` is how many entries were lost
    (``None`` when the floor cannot tell, a floor older than this record). Until an
    operator acknowledges it, a gap stops every fold of the queue.
    """

    queue: str
    after: str
    upto: str
    count: int | None
    found_at: int
    acknowledged_at: int | None = None
    acknowledged_by: str | None = None
    note: str = ""

    @property
    def acknowledged(self) -> bool:
        return self.acknowledged_at is not None

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def describe(self) -> str:
        count = "an unknown number of" if self.count is None else str(self.count)
        state = (f"acknowledged by {self.acknowledged_by or '?'}" if self.acknowledged
                 else "NOT acknowledged")
        return (f"{self.queue}: {count} entries lost after {self.after} up to {self.upto} "
                f"({state})")


@dataclass(frozen=True, slots=True)
class GapBaseline:
    """What the driver compares the stream against to find losses after the checkpoint.

    ``accounted`` counts the stream entries ever added up to the checkpoint, plus lost ones
    already acknowledged (``None``: unknown, on a floor older than this count).
    ``acknowledged_upto`` is the highest id an acknowledged gap covers.
    """

    checkpoint: str
    accounted: int | None
    acknowledged_upto: str


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


def _qk(queue: str) -> bytes:
    return check_name(queue, "queue name").encode() + b"\x00"


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


class Floor(LmdbStore):
    """The LMDB floor at ``path`` (a directory, created when missing).

    ``map_size`` is only the starting size: the map doubles whenever a commit needs more.
    Instances for the same path in one process share one environment.
    """

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE) -> None:
        super().__init__(path, _DBS, map_size)

    @staticmethod
    def _state(txn: Txn, dbs: Dbs, queue: str) -> dict[str, Any]:
        raw = txn.get(queue.encode(), db=dbs["queues"])
        if raw is None:
            return {"checkpoint": ZERO_ID, "entries": 0, "quarantined": 0, "slices": 0,
                    "pending": 0, "trimmed_through": ZERO_ID, "accounted": 0}
        state: dict[str, Any] = json.loads(cast(bytes, raw))
        if "accounted" not in state:  # a floor from before the count: known only when empty
            state["accounted"] = 0 if state["checkpoint"] == ZERO_ID else None
        return state

    @staticmethod
    def _save(txn: Txn, dbs: Dbs, queue: str, state: dict[str, Any]
              ) -> None:
        txn.put(queue.encode(), json.dumps(state).encode(), db=dbs["queues"])

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

    # -- the chain of digests (what this floor uploaded, to check the bucket against) ------

    def keep_digest(self, meta: SliceMeta) -> None:
        """Record the checksums and chain digests of the slice as it was uploaded (a slice
        folded without a remote has none until then)."""
        key = _qk(meta.queue) + id_key(meta.first)

        def txn_fn(txn: Txn, dbs: Dbs) -> None:
            raw = txn.get(key, db=dbs["slices"])
            if raw is None:
                return
            record = json.loads(cast(bytes, raw))
            record.update(sha256=meta.sha256, size=meta.size, digest=meta.digest,
                          prev_digest=meta.prev_digest)
            txn.put(key, json.dumps(record).encode(), db=dbs["slices"])

        self._write(txn_fn)

    def uploaded_slices(self, queue: str) -> list[SliceMeta]:
        """The slices this floor uploaded or restored, with their digests, in order."""
        with self._read() as (txn, dbs):
            records = [json.loads(value) for _, value in
                       self._scan(txn, dbs["slices"], _qk(queue))]
        return [SliceMeta.from_json(r) for r in records if r.get("uploaded") and r.get("digest")]

    def last_digest(self, queue: str) -> str:
        """The digest the queue's next slice chains from (``""``, the genesis, before the
        first)."""
        qk = _qk(queue)
        with self._read() as (txn, dbs):
            cur = txn.cursor(db=dbs["slices"])
            found = cur.set_range(qk[:-1] + b"\x01")  # the first key after this queue's
            found = cur.prev() if found else cur.last()
            key = cast(bytes, cur.key()) if found else b""
            if not key.startswith(qk):
                return ""
            return str(json.loads(cast(bytes, cur.value())).get("digest", ""))

    def digest_before(self, meta: SliceMeta) -> str:
        """The digest of the slice that ends at ``meta.prev`` (``""`` if unknown)."""
        if meta.prev == ZERO_ID:
            return ""  # the genesis: the first slice follows nothing
        qk = _qk(meta.queue)
        with self._read() as (txn, dbs):
            cur = txn.cursor(db=dbs["slices"])
            found = cur.set_range(qk + id_key(meta.first))
            found = cur.prev() if found else cur.last()
            if not found or not cast(bytes, cur.key()).startswith(qk):
                return ""
            record = json.loads(cast(bytes, cur.value()))
        return str(record.get("digest", "")) if record.get("last") == meta.prev else ""

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

    # -- gaps: entries lost before the floor took them ------------------------------------

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

    def gap_baseline(self, queue: str) -> GapBaseline:
        with self._read() as (txn, dbs):
            state = self._state(txn, dbs, queue)
        acked = [g["upto"] for g in state.get("gaps", ()) if g.get("acknowledged_at")]
        upto = max(acked, key=id_key, default=ZERO_ID)
        return GapBaseline(str(state["checkpoint"]), state["accounted"], upto)

    def anchor_accounted(self, queue: str, checkpoint: str, accounted: int) -> None:
        """Set an unknown count, measured by the driver while the checkpoint held still."""
        def txn_fn(txn: Txn, dbs: Dbs) -> None:
            state = self._state(txn, dbs, queue)
            if state["accounted"] is None and state["checkpoint"] == checkpoint:
                state["accounted"] = accounted
                self._save(txn, dbs, queue, state)

        self._write(txn_fn)

    def record_gap(self, queue: str, after: str, upto: str, count: int | None) -> Gap:
        """Remember a loss found by a fold (an open gap at the same checkpoint is updated)."""
        def txn_fn(txn: Txn, dbs: Dbs) -> Gap:
            state = self._state(txn, dbs, queue)
            gaps: list[dict[str, Any]] = state.setdefault("gaps", [])
            row = next((g for g in gaps if g["after"] == after and not g["acknowledged_at"]),
                       None)
            if row is None:
                row = {"after": after, "found_at": int(time.time() * 1000),
                       "acknowledged_at": None, "acknowledged_by": None, "note": ""}
                gaps.append(row)
            row.update(upto=upto, count=count)
            self._save(txn, dbs, queue, state)
            return _gap(queue, row)

        return self._write(txn_fn)

    def acknowledge_gaps(self, queue: str, by: str, note: str = "") -> list[Gap]:
        """Accept every open gap of ``queue`` as lost, so folds go on; returns them.

        The count of each joins the floor's accounted entries, so the same loss is not
        found again; the record stays, with who acknowledged it and when."""
        def txn_fn(txn: Txn, dbs: Dbs) -> list[Gap]:
            state = self._state(txn, dbs, queue)
            now = int(time.time() * 1000)
            done = []
            for row in state.get("gaps", ()):
                if row["acknowledged_at"]:
                    continue
                row.update(acknowledged_at=now, acknowledged_by=by, note=note)
                if state["accounted"] is not None and row["count"] is not None:
                    state["accounted"] += row["count"]
                done.append(_gap(queue, row))
            if done:
                self._save(txn, dbs, queue, state)
            return done

        return self._write(txn_fn)

    def gaps(self, queue: str) -> list[Gap]:
        """Every loss recorded for ``queue``, acknowledged or not, oldest first."""
        with self._read() as (txn, dbs):
            return [_gap(queue, g) for g in self._state(txn, dbs, queue).get("gaps", ())]


def _gap(queue: str, row: dict[str, Any]) -> Gap:
    return Gap(queue, row["after"], row["upto"], row["count"], row["found_at"],
               row["acknowledged_at"], row["acknowledged_by"], row.get("note", ""))


__all__ = ["Audit", "Floor", "FloorError", "FloorFull", "FloorGap", "FloorStatus", "Gap",
           "GapBaseline"]
