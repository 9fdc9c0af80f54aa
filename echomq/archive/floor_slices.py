"""The floor's slices, inside one transaction each: commit, forget, mark uploaded, read.

One write transaction commits a whole slice (entries, indexes, quarantine, the slice
record and the checkpoint advance), so a crash, even ``kill -9``, leaves either all of a
slice or none of it. Commits are idempotent: a slice at or below the checkpoint is a
no-op, and an entry already present is not counted twice. A prune forgets slices in
bounded transactions of entries, then one of records, so a rerun finishes an interrupted
one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial

from echomq.archive.entries import parse_line
from echomq.archive.floor_chain import digest_before, update_record
from echomq.archive.floor_rows import index_rows, put
from echomq.archive.floor_state import load, queue_key, save
from echomq.archive.lmdbstore import Dbs, LmdbStore, Txn, must_get, scan
from echomq.archive.slices import RawItem, SliceContent, SliceMeta, build_slice
from echomq.archive.stream_ids import ZERO_ID, id_key, id_lt
from echomq.errors import ChecksumMismatch, FloorGap


def commit(txn: Txn, dbs: Dbs, *, content: SliceContent, uploaded: bool, keep_bytes: bool
           ) -> tuple[int, int] | None:
    """Commit ``content`` and advance the checkpoint (see ``Floor.commit_slice``)."""
    meta = content.meta
    qk = queue_key(meta.queue)
    state = load(txn, dbs, meta.queue)
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
    for name, pairs in index_rows(qk, items).items():
        if pairs:
            added[name] = put(txn, dbs[name], pairs, in_order=name != "by_job")
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
    save(txn, dbs, meta.queue, state)
    return added["entries"], added["quarantine"]


def commit_all(txn: Txn, dbs: Dbs, *, contents: Sequence[SliceContent], uploaded: bool
               ) -> list[tuple[int, int] | None]:
    """:func:`commit` of each of ``contents`` in order, in the one transaction."""
    return [commit(txn, dbs, content=c, uploaded=uploaded, keep_bytes=True) for c in contents]


def stored_items(txn: Txn, dbs: Dbs, qk: bytes, *, start: bytes | None = None,
                 through: bytes, limit: int | None = None) -> list[RawItem]:
    """The stored entries and quarantined lines with keys from ``start`` (or the queue's
    first) through ``through``, parsed again (at most ``limit`` in all)."""
    items: list[RawItem] = []
    for name in ("entries", "quarantine"):
        for key, line in scan(txn, dbs[name], qk, start):
            if key > through or (limit is not None and len(items) >= limit):
                break
            sid, fields = parse_line(line)
            items.append((sid, fields, line))
    return items


def slice_bytes(store: LmdbStore, meta: SliceMeta) -> bytes:
    """A pending slice's object bytes: the kept copy, or else rebuilt from its stored
    entries (chained from the digest before it), which must be all of them."""
    qk = queue_key(meta.queue)
    lo, hi = qk + id_key(meta.first), qk + id_key(meta.last)
    with store.read() as (txn, dbs):
        data = txn.get(lo, db=dbs["pending"])
        if data:
            return bytes(data)
        items = stored_items(txn, dbs, qk, start=lo, through=hi)
        prev_digest = meta.prev_digest or digest_before(txn, dbs, meta)
    items.sort(key=lambda i: id_key(i[0]))
    rebuilt = build_slice(meta.queue, meta.prev, items, prev_digest=prev_digest)
    # Another zlib or level may compress differently: the same entries are the same slice.
    if rebuilt.meta.count != meta.count:
        raise ChecksumMismatch(f"{meta.name}: cannot rebuild from the floor "
                               f"({rebuilt.meta.count} of {meta.count} entries)")
    return rebuilt.data


def drop_through(store: LmdbStore, queue: str, through: str, *, digest: str,
                 accounted: int | None, batch: int) -> tuple[int, int, int]:
    """Forget the queue's slices through ``through`` (see ``Floor.drop_through``):
    entries ``batch`` at a time, one transaction each, then the records in one."""
    entries = quarantined = 0
    more = True
    while more:
        gone, bad, more = store.write(partial(drop_entries, queue=queue, through=through,
                                              batch=batch))
        entries, quarantined = entries + gone, quarantined + bad
    slices = store.write(partial(drop_records, queue=queue, through=through, digest=digest,
                                 accounted=accounted))
    return slices, entries, quarantined


def drop_entries(txn: Txn, dbs: Dbs, *, queue: str, through: str, batch: int
                 ) -> tuple[int, int, bool]:
    """Delete up to ``batch`` of the queue's entries (and quarantined lines) through
    ``through``, with their index rows: (entries, quarantined, more may be left)."""
    qk = queue_key(queue)
    items = stored_items(txn, dbs, qk, through=qk + id_key(through), limit=batch)
    gone = {"entries": 0, "quarantine": 0}
    for name, pairs in index_rows(qk, items).items():
        for key, _ in pairs:
            if txn.delete(key, db=dbs[name]) and name in gone:
                gone[name] += 1
    state = load(txn, dbs, queue)
    state["entries"] -= gone["entries"]
    state["quarantined"] -= gone["quarantine"]
    save(txn, dbs, queue, state)
    return gone["entries"], gone["quarantine"], len(items) >= batch


def drop_records(txn: Txn, dbs: Dbs, *, queue: str, through: str, digest: str,
                 accounted: int | None) -> int:
    """Delete the records of the slices ending at or before ``through`` and move the
    queue's base (and a checkpoint behind it) up to it; how many records went."""
    state = load(txn, dbs, queue)
    keys = [key for key, value in scan(txn, dbs["slices"], queue_key(queue))
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
    save(txn, dbs, queue, state)
    return len(keys)


def mark_uploaded(txn: Txn, dbs: Dbs, *, meta: SliceMeta, keep_digest: bool) -> None:
    """Drop the slice's kept bytes and flag its record uploaded (with its digests when
    ``keep_digest``)."""
    was_pending = bool(txn.delete(queue_key(meta.queue) + id_key(meta.first),
                                  db=dbs["pending"]))
    if keep_digest or was_pending:
        update_record(txn, dbs, meta, digests=keep_digest, uploaded=was_pending)
    if not was_pending:
        return
    state = load(txn, dbs, meta.queue)
    state["pending"] -= 1
    save(txn, dbs, meta.queue, state)


def records(txn: Txn, dbs: Dbs, queue: str, *, pending_only: bool) -> list[SliceMeta]:
    """The queue's slice records in history order (or only those not yet uploaded)."""
    qk = queue_key(queue)
    if not pending_only:
        return [SliceMeta.from_json(json.loads(value))
                for _, value in scan(txn, dbs["slices"], qk)]
    return [SliceMeta.from_json(json.loads(must_get(txn, dbs["slices"], key)))
            for key, _ in scan(txn, dbs["pending"], qk)]


def safe_trim_point(txn: Txn, dbs: Dbs, queue: str, *, with_remote: bool) -> str:
    """The last id held by the floor and, ``with_remote``, already uploaded too."""
    checkpoint = str(load(txn, dbs, queue)["checkpoint"])
    if not with_remote:
        return checkpoint
    for key, _ in scan(txn, dbs["pending"], queue_key(queue)):
        return SliceMeta.from_json(json.loads(must_get(txn, dbs["slices"], key))).prev
    return checkpoint
