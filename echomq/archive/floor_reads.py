"""The floor's reads for people, inside one read snapshot each: by job, by time, in full.

Audits walk the per-outcome time indexes (``floor_rows.BY``: ``at + id`` after the queue's
prefix), merged into one time order; a job's history walks the job index; both fetch
each entry by its id from ``entries``.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, cast

from echomq.archive.entries import (
    ArchivedEntry,
    Outcome,
    QuarantinedEntry,
    parse_entry,
    parse_line,
    to_ms,
    write_jsonl,
)
from echomq.archive.floor_gaps import Gap, listed
from echomq.archive.floor_rows import BY, U64
from echomq.archive.floor_state import load, queue_key
from echomq.archive.lmdbstore import Dbs, Txn, must_get, scan
from echomq.archive.stream_ids import id_from_key


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


def status(txn: Txn, dbs: Dbs, queue: str) -> FloorStatus:
    state = load(txn, dbs, queue)
    oldest, newest = time_span(txn, dbs, queue)
    gaps = listed(state, queue)
    return FloorStatus(queue, state["checkpoint"], state["entries"], state["quarantined"],
                       state["slices"], state["pending"], state["trimmed_through"],
                       oldest, newest, sum(not g.acknowledged for g in gaps),
                       sum(g.acknowledged for g in gaps))


def queue_names(txn: Txn, dbs: Dbs) -> list[str]:
    return [k.decode() for k, _ in scan(txn, dbs["queues"], b"")
            if not k.startswith(b"\x00")]  # the floor's own records (id, format)


def time_span(txn: Txn, dbs: Dbs, queue: str) -> tuple[int | None, int | None]:
    """The oldest and newest settle times of ``queue``, over every outcome."""
    qk = queue_key(queue)
    ends = [_time_range(txn, dbs[BY[o.value]], qk) for o in Outcome]
    found = [end for end in ends if end is not None]
    if not found:
        return None, None
    return min(e[0] for e in found), max(e[1] for e in found)


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


def entry(txn: Txn, dbs: Dbs, queue: str, key: bytes) -> ArchivedEntry:
    """The archived entry whose id key (after the queue's prefix) is ``key``."""
    sid, fields = parse_line(must_get(txn, dbs["entries"], queue_key(queue) + key))
    item = parse_entry(queue, sid, fields)
    assert isinstance(item, ArchivedEntry)
    return item


def archived(txn: Txn, dbs: Dbs, queue: str) -> list[ArchivedEntry]:
    """Every archived outcome of ``queue``, parsed, in stream order."""
    return [e for e in _parsed(txn, dbs, queue, "entries") if isinstance(e, ArchivedEntry)]


def quarantined(txn: Txn, dbs: Dbs, queue: str) -> list[QuarantinedEntry]:
    """Every quarantined line of ``queue``, parsed, in stream order."""
    return [e for e in _parsed(txn, dbs, queue, "quarantine")
            if isinstance(e, QuarantinedEntry)]


def _parsed(txn: Txn, dbs: Dbs, queue: str, db: str
            ) -> list[ArchivedEntry | QuarantinedEntry]:
    return [parse_entry(queue, *parse_line(line))
            for _, line in scan(txn, dbs[db], queue_key(queue))]


def history(txn: Txn, dbs: Dbs, queue: str, job_id: str, offset: int, limit: int | None
            ) -> list[ArchivedEntry]:
    """One job's outcomes, oldest first: ``limit`` of them from the ``offset``-th."""
    prefix = queue_key(queue) + job_id.encode() + b"\x00"
    found = itertools.islice(scan(txn, dbs["by_job"], prefix), offset,
                             None if limit is None else offset + limit)
    keys = [key[len(prefix):] for key, _ in found]
    return [entry(txn, dbs, queue, k) for k in keys]


def last_of_job(txn: Txn, dbs: Dbs, queue: str, job_id: str) -> ArchivedEntry | None:
    """One job's last outcome (what a replay takes), found from the end of its keys: one
    cursor step however many times it ran."""
    prefix = queue_key(queue) + job_id.encode() + b"\x00"
    cur = txn.cursor(db=dbs["by_job"])
    past = prefix[:-1] + b"\x01"  # the first key after every key of this job
    moved = cur.prev() if cur.set_range(past) else cur.last()
    key = cast(bytes, cur.key()) if moved else b""
    if not key.startswith(prefix):
        return None
    return entry(txn, dbs, queue, key[len(prefix):])


def settled(txn: Txn, dbs: Dbs, queue: str, outcome: Outcome | str | None,
            since: int | datetime | None, until: int | datetime | None, limit: int | None
            ) -> list[ArchivedEntry]:
    """Outcomes (all, or of one ``outcome``) settled at ``since <= at < until``, oldest
    first, at most ``limit``."""
    lo, hi = to_ms(since), to_ms(until)
    outcomes = list(Outcome) if outcome is None else [Outcome(outcome)]
    qk = queue_key(queue)
    start = qk + U64(max(lo or 0, 0))
    # one run per outcome, each in (at, id) order: merged, they are time order
    runs = [_time_keys(txn, dbs[BY[o.value]], qk, start) for o in outcomes]
    found: list[ArchivedEntry] = []
    for key in heapq.merge(*runs):
        if limit is not None and len(found) >= limit:
            break
        if hi is not None and int.from_bytes(key[:8], "big") >= hi:
            break
        found.append(entry(txn, dbs, queue, key[8:]))
    return found


def audit(txn: Txn, dbs: Dbs, queue: str, outcome: Outcome | str | None,
          since: int | datetime | None, until: int | datetime | None, limit: int | None
          ) -> Audit:
    """:func:`settled`, with the queue's known losses as the audit's ``gaps`` (read in
    the same snapshot), so an audit never reads as complete when the floor knows it is
    not."""
    out = Audit(settled(txn, dbs, queue, outcome, since, until, limit))
    out.gaps = tuple(listed(load(txn, dbs, queue), queue))
    return out


def export_jsonl(txn: Txn, dbs: Dbs, queue: str, out: IO[str], outcome: Outcome | str | None,
                 since: int | datetime | None, until: int | datetime | None, *,
                 quarantine: bool) -> int:
    """An audit as JSON lines (plus the quarantine when asked); returns the count."""
    count = write_jsonl(audit(txn, dbs, queue, outcome, since, until, None), out)
    if quarantine:
        count += write_jsonl(quarantined(txn, dbs, queue), out)
    return count


def lines(txn: Txn, dbs: Dbs, queue: str) -> Iterator[bytes]:
    """Every archived entry of ``queue`` as its stored line, in stream order."""
    for _, line in scan(txn, dbs["entries"], queue_key(queue)):
        yield line


def _time_keys(txn: Txn, db: Any, prefix: bytes, start: bytes) -> Iterator[bytes]:
    """``at + id`` of every key under ``prefix`` of one outcome's time index, from
    ``start`` on."""
    for key, _ in scan(txn, db, prefix, start):
        yield key[len(prefix):]


def digest(txn: Txn, dbs: Dbs, queue: str) -> str:
    """sha256 over every entry and quarantined line: equal floors give equal digests."""
    qk = queue_key(queue)
    h = hashlib.sha256()
    for name in ("entries", "quarantine"):
        for key, line in scan(txn, dbs[name], qk):
            h.update(name.encode() + id_from_key(key[len(qk):]).encode() + line)
    return h.hexdigest()
