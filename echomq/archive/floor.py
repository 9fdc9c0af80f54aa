"""The floor: the archive's local LMDB store, the copy audits read and restores rebuild.

One write transaction commits a whole slice (entries, indexes, quarantine, the slice
record and the checkpoint advance), so a crash, even ``kill -9``, leaves either all of a
slice or none of it. Commits are idempotent: a slice at or below the checkpoint is a
no-op, and an entry already present is not counted twice. Readers use LMDB's MVCC
snapshots and never block the writer. A full map is grown and the transaction retried.

Keys start with ``queue + NUL`` (queue names never contain control characters), then
16-byte stream ids whose byte order is stream order (see ``stream_ids.id_key``).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import os
import struct
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import IO, TYPE_CHECKING, Any, cast

from echomq.archive import accel
from echomq.archive.entries import (
    ArchivedEntry,
    Outcome,
    QuarantinedEntry,
    index_terms,
    malformed_reason,
    parse_entry,
    parse_line,
    to_ms,
    write_jsonl,
)
from echomq.archive.floor_chain import DigestChain
from echomq.archive.floor_format import FloorFormat
from echomq.archive.floor_gaps import Gap, GapLedger, _gap
from echomq.archive.floor_rebase import PendingRebase
from echomq.archive.floor_state import _qk
from echomq.archive.lmdbstore import Dbs, Txn
from echomq.archive.slices import RawItem, SliceContent, SliceMeta, build_slice
from echomq.archive.stream_ids import ZERO_ID, id_from_key, id_key, id_lt
from echomq.errors import ChecksumMismatch, FloorGap
from echomq.queue.keys import MAX_NAME_LENGTH, names_ok

if TYPE_CHECKING:
    from echomq.archive.history_sql import QueryResult
    from echomq.progress import Tick

DEFAULT_MAP_SIZE = 64 * 1024 * 1024
_BY = {o.value: f"by_{o.value}" for o in Outcome}
"""One time index per outcome (format 2): keys ``queue NUL, at, id``; a time query across
outcomes merges them."""
_DBS = ("entries", "by_job", *_BY.values(), "quarantine", "slices", "pending", "queues")


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


Pairs = list[tuple[bytes, bytes]]
ODD_TEXT = b"\\u"
"""JSON writes ``\\u`` only for a control character: a stray byte's escape (not UTF-8,
``entries._escaped_line``), a repeated field's mark (``entries.REPEAT``), or one in the text
itself (or a backslash before ``u`` there): such an entry gets every check of
``malformed_reason``, which quarantines the first two."""


def _index_rows(qk: bytes, items: Sequence[RawItem]) -> dict[str, Pairs]:
    """The key/value pairs a slice adds to each sub-database; each outcome's time index
    gets one sorted run (see :func:`_put`).

    The fold's hot loop: in C when the accelerator is built (see
    :mod:`echomq.archive.accel`), which hands every entry not of the common shape to
    :func:`_terms`; else :func:`_index_rows_py`.
    """
    if accel.FOLD is None:
        return _index_rows_py(qk, items)
    entries, by_job, bad, *runs = accel.FOLD.rows(qk, items, MAX_NAME_LENGTH, _terms, id_key)
    rows = {"entries": entries, "by_job": by_job, "quarantine": bad}
    for outcome, run in zip(_BY.values(), runs, strict=True):
        run.sort()  # settle times nearly follow stream order: a near-linear sort
        rows[outcome] = run
    return rows


def _terms(fields: Mapping[str, str], line: bytes) -> tuple[str, str, int] | str:
    """(job, outcome, at) of an entry the accelerator leaves to Python, or the reason it
    is quarantined: exactly what :func:`_index_rows_py` decides for it."""
    if ODD_TEXT not in line:
        return index_terms(fields)
    return malformed_reason(fields) or index_terms(fields)


def _index_rows_py(qk: bytes, items: Sequence[RawItem]) -> dict[str, Pairs]:
    """:func:`_index_rows` in Python: one tuple per index per entry, keys built from
    shared parts, the job ids checked for the whole slice at once. (Checking and keying the
    slice column by column, in C-level passes, measured no faster: the cost is in the
    objects, not the loop.)
    """
    entries: Pairs = []
    by_job: Pairs = []
    bad: Pairs = []
    runs: dict[str, Pairs] = {o.value: [] for o in Outcome}
    add_entry, add_job, add_bad = entries.append, by_job.append, bad.append
    adds = {o: run.append for o, run in runs.items()}
    checked = names_ok([fields.get("job") for _, fields, _ in items])
    for sid, fields, line in items:
        ik = id_key(sid)
        terms = index_terms(fields, job_checked=checked) if ODD_TEXT not in line else (
            malformed_reason(fields) or index_terms(fields))
        if isinstance(terms, str):
            add_bad((qk + ik, line))
            continue
        job, outcome, at_ms = terms
        add_entry((qk + ik, line))
        add_job((qk + job.encode() + b"\x00" + ik, b""))
        adds[outcome]((qk + _U64(at_ms) + ik, b""))
    rows = {"entries": entries, "by_job": by_job, "quarantine": bad}
    for outcome, run in runs.items():
        run.sort()  # settle times nearly follow stream order: a near-linear sort
        rows[_BY[outcome]] = run
    return rows


def _put(txn: Txn, db: Any, pairs: Pairs, *, in_order: bool) -> int:
    """Put ``pairs`` (keys unique; sorted when ``in_order``) unless present; how many
    were new.

    Sorted keys past the database's last key go in with LMDB's append mode: no search per
    put, and full pages instead of half-split ones (random keys, the job index, go in the
    ordinary way: sorting them first measured no faster). Append skips a key that is not
    past the previous one, so whatever it skipped is put again the ordinary way (a present
    key is not counted twice)."""
    cur = txn.cursor(db=db)
    if not in_order or (cur.last() and cast(bytes, cur.key()) >= pairs[0][0]):
        return int(cur.putmulti(pairs, overwrite=False)[1])
    added = int(cur.putmulti(pairs, append=True)[1])
    if added < len(pairs):
        added += int(cur.putmulti(pairs, overwrite=False)[1])
    return added


class Floor(GapLedger, DigestChain, FloorFormat, PendingRebase):
    """The LMDB floor at ``path`` (a directory, created when missing).

    ``map_size`` is only the starting size: the map doubles whenever a commit needs more.
    Instances for the same path in one process share one environment.
    """

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE) -> None:
        super().__init__(path, _DBS, map_size)
        try:
            self._ensure_format()
        except BaseException:
            self.close()
            raise

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
        return self._write(partial(self._commit, content=content, uploaded=uploaded,
                                   keep_bytes=keep_bytes))

    def commit_slices(self, contents: Sequence[SliceContent], *, uploaded: bool
                      ) -> list[tuple[int, int] | None]:
        """:meth:`commit_slice` for each of ``contents`` in order, all in one transaction:
        a restore of many small slices pays one synced commit for the lot, not one each."""
        def txn_fn(txn: Txn, dbs: Dbs) -> list[tuple[int, int] | None]:
            return [self._commit(txn, dbs, content=c, uploaded=uploaded, keep_bytes=True)
                    for c in contents]

        return self._write(txn_fn)

    def _commit(self, txn: Txn, dbs: Dbs, *, content: SliceContent, uploaded: bool,
                keep_bytes: bool) -> tuple[int, int] | None:
        meta = content.meta
        qk = _qk(meta.queue)
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
        added = {"entries": 0, "quarantine": 0}
        for name, pairs in _index_rows(qk, items).items():
            if pairs:
                added[name] = _put(txn, dbs[name], pairs, in_order=name != "by_job")
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

    def drop_through(self, queue: str, through: str, *, digest: str = "",
                     accounted: int | None = None, batch: int = 20_000
                     ) -> tuple[int, int, int]:
        """Forget ``queue``'s slices that end at or before ``through`` (a slice boundary):
        their entries, index rows, quarantine and records; returns (slices, entries,
        quarantined) forgotten. ``digest`` is the last dropped slice's, what the next slice
        chains from. A floor behind ``through`` starts there: its checkpoint moves up, and
        its accounted count becomes ``accounted`` (unknown when None). Entries go in
        batches of ``batch`` per transaction; a rerun finishes an interrupted drop."""
        dropped = [0, 0]
        while self._write(lambda txn, dbs: self._drop_entries(txn, dbs, queue, through,
                                                              batch, dropped)):
            pass
        slices = self._write(lambda txn, dbs: self._drop_records(txn, dbs, queue, through,
                                                                 digest, accounted))
        return slices, dropped[0], dropped[1]

    def _drop_entries(self, txn: Txn, dbs: Dbs, queue: str, through: str, batch: int,
                      dropped: list[int]) -> bool:
        """One transaction of :meth:`drop_through`: up to ``batch`` entries and quarantined
        lines at or before ``through`` with their index rows, counted into ``dropped``
        (entries, quarantined); whether a full batch went (more may remain)."""
        qk = _qk(queue)
        hi = qk + id_key(through)
        items: list[RawItem] = []
        for name in ("entries", "quarantine"):
            for key, line in self._scan(txn, dbs[name], qk):
                if key > hi or len(items) >= batch:
                    break
                sid, fields = parse_line(line)
                items.append((sid, fields, line))
        gone = {"entries": 0, "quarantine": 0}
        for name, pairs in _index_rows(qk, items).items():
            for key, _ in pairs:
                if txn.delete(key, db=dbs[name]) and name in gone:
                    gone[name] += 1
        state = self._state(txn, dbs, queue)
        state["entries"] -= gone["entries"]
        state["quarantined"] -= gone["quarantine"]
        self._save(txn, dbs, queue, state)
        dropped[0] += gone["entries"]
        dropped[1] += gone["quarantine"]
        return len(items) >= batch

    def _drop_records(self, txn: Txn, dbs: Dbs, queue: str, through: str, digest: str,
                      accounted: int | None) -> int:
        """The last transaction of :meth:`drop_through`: the slice records through
        ``through``, the checkpoint moved up to it and the new base; how many slices went."""
        qk = _qk(queue)
        state = self._state(txn, dbs, queue)
        keys = [key for key, value in self._scan(txn, dbs["slices"], qk)
                if not id_lt(through, json.loads(value)["last"])]
        for key in keys:
            txn.delete(key, db=dbs["slices"])
            if txn.delete(key, db=dbs["pending"]):
                state["pending"] -= 1
        state["slices"] -= len(keys)
        if id_lt(state["checkpoint"], through):
            state["checkpoint"] = through
            state["accounted"] = accounted
        old = state.get("base") or {"through": ZERO_ID}
        if not id_lt(through, old["through"]):
            state["base"] = {"through": through, "digest": digest or old.get("digest", "")}
        self._save(txn, dbs, queue, state)
        return len(keys)

    def base(self, queue: str) -> tuple[str, str]:
        """(through, digest) of what a prune forgot: the floor's history starts after it
        (``0-0`` before any prune)."""
        with self._read() as (txn, dbs):
            found = self._state(txn, dbs, queue).get("base") or {}
        return str(found.get("through", ZERO_ID)), str(found.get("digest", ""))

    def mark_uploaded(self, meta: SliceMeta, *, keep_digest: bool = False) -> None:
        """The slice is in the remote: drop its kept bytes and flag its record; with
        ``keep_digest``, record its checksums and digests too (see
        :meth:`~echomq.archive.floor_chain.DigestChain.keep_digest`), in the same
        transaction."""
        key = _qk(meta.queue) + id_key(meta.first)

        def txn_fn(txn: Txn, dbs: Dbs) -> None:
            was_pending = bool(txn.delete(key, db=dbs["pending"]))
            if keep_digest or was_pending:
                self._update_record(txn, dbs, meta, digests=keep_digest, uploaded=was_pending)
            if not was_pending:
                return
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
                    if not k.startswith(b"\x00")]  # the floor's own records (id, format)

    def status(self, queue: str) -> FloorStatus:
        qk = _qk(queue)
        with self._read() as (txn, dbs):
            state = self._state(txn, dbs, queue)
            ends = [self._time_range(txn, dbs[_BY[o.value]], qk) for o in Outcome]
            found = [end for end in ends if end is not None]
            oldest = min(e[0] for e in found) if found else None
            newest = max(e[1] for e in found) if found else None
        gaps = [_gap(queue, g) for g in state.get("gaps", ())]
        return FloorStatus(queue, state["checkpoint"], state["entries"], state["quarantined"],
                           state["slices"], state["pending"], state["trimmed_through"],
                           oldest, newest, sum(not g.acknowledged for g in gaps),
                           sum(g.acknowledged for g in gaps))

    @staticmethod
    def _time_range(txn: Txn, db: Any, prefix: bytes) -> tuple[int, int] | None:
        """The first and last settle time under ``prefix`` in one outcome's time index
        (None: empty)."""
        cur = txn.cursor(db=db)
        if not cur.set_range(prefix) or not cast(bytes, cur.key()).startswith(prefix):
            return None
        first = int.from_bytes(cast(bytes, cur.key())[len(prefix):len(prefix) + 8], "big")
        if cur.set_range(prefix[:-1] + b"\x01"):  # the first key after this prefix's
            cur.prev()
        else:
            cur.last()
        last = int.from_bytes(cast(bytes, cur.key())[len(prefix):len(prefix) + 8], "big")
        return first, last

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

    def query(self, sql: str, *, external_access: bool = False,
              progress: Tick | None = None) -> QueryResult:
        """Run ``sql`` (DuckDB) over the view ``outcomes`` of every queue in the floor:
        queue, job_id, outcome, result, attempts, at, created_at, started_at (timestamps,
        UTC), error (a dead outcome's result), name and payload (when recorded), stream_id.
        The SQL reads and writes no file, attaches no database and loads no extension
        unless ``external_access=True`` (for ``COPY ... TO`` exports of your own).
        ``progress`` is told how many entries were read. Needs the extra ``echomq[sql]``."""
        from echomq.archive.history_sql import query

        return query(self, sql, external_access=external_access, progress=progress)

    def export(self, queue: str, path: str | os.PathLike[str], format: str = "parquet",
               since: int | datetime | None = None, until: int | datetime | None = None,
               progress: Tick | None = None) -> int:
        """Write ``queue``'s outcomes settled at ``since <= at < until`` to ``path``, as
        Parquet or JSON lines (the view's columns), for a warehouse; returns the count.
        ``progress`` is told how many entries were read. Needs the extra ``echomq[sql]``."""
        from echomq.archive.history_sql import export

        return export(self, queue, path, format, since, until, progress)

    def entries(self, queue: str) -> list[ArchivedEntry]:
        """Every archived outcome of ``queue`` in stream order."""
        return [e for e in self._lines(queue, "entries") if isinstance(e, ArchivedEntry)]

    def history(self, queue: str, job_id: str, *, offset: int = 0,
                limit: int | None = None) -> list[ArchivedEntry]:
        """Every archived outcome of one job, oldest first (``limit`` of them from the
        ``offset``-th: a page, for a job run thousands of times)."""
        prefix = _qk(queue) + job_id.encode() + b"\x00"
        with self._read() as (txn, dbs):
            found = itertools.islice(self._scan(txn, dbs["by_job"], prefix), offset,
                                     None if limit is None else offset + limit)
            keys = [key[len(prefix):] for key, _ in found]
            return [self._entry(txn, dbs, queue, k) for k in keys]

    def audit(self, queue: str, outcome: Outcome | str | None = None,
              since: int | datetime | None = None, until: int | datetime | None = None,
              limit: int | None = None) -> Audit:
        """Outcomes settled at ``since <= at < until`` (ms or datetimes), oldest first.

        The list's ``gaps`` are the queue's known losses, so an audit never reads as
        complete when the floor knows it is not."""
        lo, hi = to_ms(since), to_ms(until)
        qk = _qk(queue)
        outcomes = list(Outcome) if outcome is None else [Outcome(outcome)]
        out = Audit()
        out.gaps = tuple(self.gaps(queue))
        start = _u64(max(lo or 0, 0))
        with self._read() as (txn, dbs):
            # one run per outcome, each in (at, id) order: merged, they are time order
            runs = [self._time_keys(txn, dbs[_BY[o.value]], qk, start) for o in outcomes]
            for key in heapq.merge(*runs):
                if limit is not None and len(out) >= limit:
                    break
                if hi is not None and int.from_bytes(key[:8], "big") >= hi:
                    break
                out.append(self._entry(txn, dbs, queue, key[8:]))
        return out

    def _time_keys(self, txn: Txn, db: Any, prefix: bytes, start: bytes) -> Iterator[bytes]:
        """``at + id`` of every key under ``prefix`` of one outcome's time index, from
        ``start`` on."""
        for key, _ in self._scan(txn, db, prefix, prefix + start):
            yield key[len(prefix):]

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


__all__ = ["Audit", "Floor", "FloorStatus"]
