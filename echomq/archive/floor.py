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
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import lmdb

from echomq.archive.entries import (
    ArchivedEntry,
    Outcome,
    QuarantinedEntry,
    id_from_key,
    id_key,
    id_lt,
    parse_entry,
    parse_line,
    to_ms,
    write_jsonl,
)
from echomq.archive.slices import ZERO_ID, SliceContent, SliceMeta, build_slice
from echomq.errors import ArchiveError, ChecksumMismatch
from echomq.queue.keys import check_name

T = TypeVar("T")
DEFAULT_MAP_SIZE = 64 * 1024 * 1024
_DBS = ("entries", "by_job", "by_outcome", "by_time", "quarantine", "slices", "pending",
        "queues")


class FloorGap(ArchiveError):
    """A slice would leave a hole after the floor's checkpoint; it is refused."""


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

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _qk(queue: str) -> bytes:
    return check_name(queue, "queue name").encode() + b"\x00"


def _u64(value: int) -> bytes:
    return value.to_bytes(8, "big")


class _Shared:
    """One LMDB environment per path per process (LMDB forbids opening it twice)."""

    def __init__(self, path: str, map_size: int) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(path, map_size=map_size, max_dbs=len(_DBS), subdir=True)
        self.dbs = {name: self.env.open_db(name.encode()) for name in _DBS}
        self.refs = 0
        self.write_lock = threading.Lock()
        self.readers = 0
        self.idle = threading.Condition()


_registry: dict[str, _Shared] = {}
_registry_lock = threading.Lock()


class Floor:
    """The LMDB floor at ``path`` (a directory, created when missing).

    ``map_size`` is only the starting size: the map doubles whenever a commit needs more.
    Instances for the same path in one process share one environment.
    """

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE) -> None:
        self.path = str(Path(path).resolve())
        with _registry_lock:
            shared = _registry.get(self.path)
            if shared is None:
                shared = _registry[self.path] = _Shared(self.path, map_size)
            shared.refs += 1
        self._shared: _Shared | None = shared
        self.grows = 0

    # -- plumbing -------------------------------------------------------------------------

    @property
    def _s(self) -> _Shared:
        if self._shared is None:
            raise ArchiveError(f"the floor at {self.path} is closed")
        return self._shared

    @property
    def env(self) -> lmdb.Environment:
        return self._s.env

    def close(self) -> None:
        shared, self._shared = self._shared, None
        if shared is None:
            return
        with _registry_lock:
            shared.refs -= 1
            if shared.refs == 0:
                _registry.pop(self.path, None)
                shared.env.close()

    def __enter__(self) -> Floor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _read(self) -> Iterator[tuple[lmdb.Transaction, dict[str, Any]]]:
        s = self._s
        with s.idle:
            s.readers += 1
        try:
            with s.env.begin(buffers=False) as txn:
                yield txn, s.dbs
        finally:
            with s.idle:
                s.readers -= 1
                s.idle.notify_all()

    def _write(self, fn: Callable[[lmdb.Transaction, dict[str, Any]], T]) -> T:
        """Run ``fn`` in one write transaction, growing the map until it fits."""
        s = self._s
        with s.write_lock:
            while True:
                try:
                    with s.env.begin(write=True) as txn:
                        return fn(txn, s.dbs)
                except lmdb.MapFullError:
                    self._resize(s, s.env.info()["map_size"] * 2)
                except lmdb.MapResizedError:
                    self._resize(s, 0)  # another process grew it: adopt its size

    def _resize(self, s: _Shared, size: int) -> None:
        with s.idle:  # LMDB: no transaction of this process may be open during a resize
            s.idle.wait_for(lambda: s.readers == 0)
            s.env.set_mapsize(size)
        self.grows += 1

    @staticmethod
    def _state(txn: lmdb.Transaction, dbs: dict[str, Any], queue: str) -> dict[str, Any]:
        raw = txn.get(queue.encode(), db=dbs["queues"])
        if raw is None:
            return {"checkpoint": ZERO_ID, "entries": 0, "quarantined": 0, "slices": 0,
                    "pending": 0, "trimmed_through": ZERO_ID}
        state: dict[str, Any] = json.loads(raw)
        return state

    @staticmethod
    def _save(txn: lmdb.Transaction, dbs: dict[str, Any], queue: str, state: dict[str, Any]
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

        def txn_fn(txn: lmdb.Transaction, dbs: dict[str, Any]) -> tuple[int, int] | None:
            state = self._state(txn, dbs, meta.queue)
            checkpoint = state["checkpoint"]
            if not id_lt(checkpoint, meta.last):
                return None
            if id_lt(checkpoint, meta.prev):
                raise FloorGap(f"{meta.name}: starts after {meta.prev} but the floor's "
                               f"checkpoint for {meta.queue!r} is {checkpoint}")
            rows: dict[str, list[tuple[bytes, bytes]]] = {
                "entries": [], "by_job": [], "by_outcome": [], "by_time": [], "quarantine": []
            }
            for sid, fields, line in content.items:
                if not id_lt(checkpoint, sid):
                    continue  # already here (a slice overlapping the checkpoint)
                key = id_key(sid)
                item = parse_entry(meta.queue, sid, fields)
                if isinstance(item, QuarantinedEntry):
                    rows["quarantine"].append((qk + key, line))
                    continue
                at = _u64(item.at)
                rows["entries"].append((qk + key, line))
                rows["by_job"].append((qk + item.job_id.encode() + b"\x00" + key, b""))
                rows["by_outcome"].append((qk + item.outcome.value.encode() + b"\x00" + at + key,
                                           b""))
                rows["by_time"].append((qk + at + key, b""))
            added = {"entries": 0, "quarantine": 0}
            for name, pairs in rows.items():
                if pairs:
                    _, new = txn.cursor(db=dbs[name]).putmulti(pairs, overwrite=False)
                    added[name] = new
            state["entries"] += added["entries"]
            state["quarantined"] += added["quarantine"]
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

        def txn_fn(txn: lmdb.Transaction, dbs: dict[str, Any]) -> None:
            if not txn.delete(key, db=dbs["pending"]):
                return
            raw = txn.get(key, db=dbs["slices"])
            if raw is not None:
                record = json.loads(raw)
                record["uploaded"] = True
                txn.put(key, json.dumps(record).encode(), db=dbs["slices"])
            state = self._state(txn, dbs, meta.queue)
            state["pending"] -= 1
            self._save(txn, dbs, meta.queue, state)

        self._write(txn_fn)

    def record_trim(self, queue: str, through: str) -> None:
        """Remember that the stream was trimmed through ``through`` (for status only)."""
        def txn_fn(txn: lmdb.Transaction, dbs: dict[str, Any]) -> None:
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
        out: list[SliceMeta] = []
        with self._read() as (txn, dbs):
            cur = txn.cursor(db=dbs["pending" if pending_only else "slices"])
            if cur.set_range(qk):
                for key, value in cur:
                    if not key.startswith(qk):
                        break
                    raw = value if not pending_only else txn.get(key, db=dbs["slices"])
                    out.append(SliceMeta.from_json(json.loads(raw)))
        return out

    def pending_slices(self, queue: str) -> list[SliceMeta]:
        return self.slices(queue, pending_only=True)

    def safe_trim_point(self, queue: str, *, with_remote: bool) -> str:
        """The last id held by the floor and, ``with_remote``, already uploaded too."""
        with self._read() as (txn, dbs):
            checkpoint = str(self._state(txn, dbs, queue)["checkpoint"])
            if not with_remote:
                return checkpoint
            qk = _qk(queue)
            cur = txn.cursor(db=dbs["pending"])
            if cur.set_range(qk) and cur.key().startswith(qk):
                raw = txn.get(cur.key(), db=dbs["slices"])
                return SliceMeta.from_json(json.loads(raw)).prev
            return checkpoint

    def slice_bytes(self, meta: SliceMeta) -> bytes:
        """A pending slice's object bytes: the kept copy, or rebuilt from the floor."""
        qk = _qk(meta.queue)
        with self._read() as (txn, dbs):
            data = txn.get(qk + id_key(meta.first), db=dbs["pending"])
            if data:
                return bytes(data)
            items = []
            lo, hi = qk + id_key(meta.first), qk + id_key(meta.last)
            for name in ("entries", "quarantine"):
                cur = txn.cursor(db=dbs[name])
                if cur.set_range(lo):
                    for key, line in cur:
                        if key > hi:
                            break
                        sid, fields = parse_line(line)
                        items.append((sid, fields, bytes(line)))
        items.sort(key=lambda i: id_key(i[0]))
        rebuilt = build_slice(meta.queue, meta.prev, items)
        # Another zlib or level may compress differently: the same entries are the same slice.
        if rebuilt.meta.count != meta.count:
            raise ChecksumMismatch(f"{meta.name}: cannot rebuild from the floor "
                                       f"({rebuilt.meta.count} of {meta.count} entries)")
        return rebuilt.data

    # -- reads for people -----------------------------------------------------------------

    def queues(self) -> list[str]:
        with self._read() as (txn, dbs):
            return [k.decode() for k, _ in txn.cursor(db=dbs["queues"])]

    def status(self, queue: str) -> FloorStatus:
        qk = _qk(queue)
        with self._read() as (txn, dbs):
            state = self._state(txn, dbs, queue)
            cur = txn.cursor(db=dbs["by_time"])
            oldest = newest = None
            if cur.set_range(qk) and cur.key().startswith(qk):
                oldest = int.from_bytes(cur.key()[len(qk):len(qk) + 8], "big")
                nxt = qk[:-1] + b"\x01"
                if cur.set_range(nxt):
                    cur.prev()
                else:
                    cur.last()
                newest = int.from_bytes(cur.key()[len(qk):len(qk) + 8], "big")
        return FloorStatus(queue, state["checkpoint"], state["entries"], state["quarantined"],
                           state["slices"], state["pending"], state["trimmed_through"],
                           oldest, newest)

    def _entry(self, txn: lmdb.Transaction, dbs: dict[str, Any], queue: str, key: bytes
               ) -> ArchivedEntry:
        sid, fields = parse_line(txn.get(_qk(queue) + key, db=dbs["entries"]))
        item = parse_entry(queue, sid, fields)
        assert isinstance(item, ArchivedEntry)
        return item

    def entries(self, queue: str) -> list[ArchivedEntry]:
        """Every archived outcome of ``queue`` in stream order."""
        qk = _qk(queue)
        out = []
        with self._read() as (txn, dbs):
            cur = txn.cursor(db=dbs["entries"])
            if cur.set_range(qk):
                for key, line in cur:
                    if not key.startswith(qk):
                        break
                    sid, fields = parse_line(line)
                    item = parse_entry(queue, sid, fields)
                    assert isinstance(item, ArchivedEntry)
                    out.append(item)
        return out

    def history(self, queue: str, job_id: str) -> list[ArchivedEntry]:
        """Every archived outcome of one job, oldest first."""
        prefix = _qk(queue) + job_id.encode() + b"\x00"
        with self._read() as (txn, dbs):
            cur = txn.cursor(db=dbs["by_job"])
            keys = []
            if cur.set_range(prefix):
                for key in cur.iternext(values=False):
                    if not key.startswith(prefix):
                        break
                    keys.append(key[len(prefix):])
            return [self._entry(txn, dbs, queue, k) for k in keys]

    def audit(self, queue: str, outcome: Outcome | str | None = None,
              since: int | datetime | None = None, until: int | datetime | None = None,
              limit: int | None = None) -> list[ArchivedEntry]:
        """Outcomes settled at ``since <= at < until`` (ms or datetimes), oldest first."""
        lo, hi = to_ms(since), to_ms(until)
        prefix = _qk(queue)
        if outcome is not None:
            prefix += Outcome(outcome).value.encode() + b"\x00"
        db = "by_time" if outcome is None else "by_outcome"
        out: list[ArchivedEntry] = []
        with self._read() as (txn, dbs):
            cur = txn.cursor(db=dbs[db])
            if not cur.set_range(prefix + _u64(max(lo or 0, 0))):
                return out
            for key in cur.iternext(values=False):
                if not key.startswith(prefix) or (limit is not None and len(out) >= limit):
                    break
                at = int.from_bytes(key[len(prefix):len(prefix) + 8], "big")
                if hi is not None and at >= hi:
                    break
                out.append(self._entry(txn, dbs, queue, key[len(prefix) + 8:]))
        return out

    def quarantined(self, queue: str) -> list[QuarantinedEntry]:
        """Malformed entries kept verbatim, in stream order."""
        qk = _qk(queue)
        out = []
        with self._read() as (txn, dbs):
            cur = txn.cursor(db=dbs["quarantine"])
            if cur.set_range(qk):
                for key, line in cur:
                    if not key.startswith(qk):
                        break
                    sid, fields = parse_line(line)
                    item = parse_entry(queue, sid, fields)
                    assert isinstance(item, QuarantinedEntry)
                    out.append(item)
        return out

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
                cur = txn.cursor(db=dbs[name])
                if cur.set_range(qk):
                    for key, line in cur:
                        if not key.startswith(qk):
                            break
                        h.update(name.encode() + id_from_key(key[len(qk):]).encode() + line)
        return h.hexdigest()

    def size_bytes(self) -> int:
        """Bytes of the map in use (pages written), for the benchmark's per-entry figure."""
        info, stat = self.env.info(), self.env.stat()
        return int((info["last_pgno"] + 1) * stat["psize"])
