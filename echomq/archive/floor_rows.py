"""The floor's index rows: the key/value pairs a slice adds to each sub-database.

This is the fold's hot loop (with ``stream_read.take``): in C when the accelerator is
built (see :mod:`echomq.archive.accel`), which hands every entry not of the common shape
to :func:`_terms`; else :func:`index_rows_py`, which it is tested equal to. The same rows
are what a prune deletes, so both ways of changing the floor key entries alike.

Keys start with ``queue + NUL`` (``floor_state.queue_key``), then 16-byte stream ids
whose byte order is stream order (``entries.id_key``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, cast

from echomq.archive import accel
from echomq.archive.entries import Outcome, index_terms, malformed_reason
from echomq.archive.lmdbstore import Txn
from echomq.archive.slices import RawItem
from echomq.archive.stream_ids import id_key
from echomq.queue.keys import MAX_NAME_LENGTH, names_ok

BY = {o.value: f"by_{o.value}" for o in Outcome}
"""One time index per outcome (format 2): keys ``queue NUL, at, id``; a time query across
outcomes merges them."""
DBS = ("entries", "by_job", *BY.values(), "quarantine", "slices", "pending", "queues")
"""Every sub-database of the floor."""
U64 = struct.Struct(">Q").pack
"""A settle time as 8 big-endian bytes: byte order is time order."""

Pairs = list[tuple[bytes, bytes]]
ODD_TEXT = b"\\u"
"""JSON writes ``\\u`` only for a control character: a stray byte's escape (not UTF-8,
``entries._escaped_line``), a repeated field's mark (``entries.REPEAT``), or one in the text
itself (or a backslash before ``u`` there): such an entry gets every check of
``malformed_reason``, which quarantines the first two."""


def index_rows(qk: bytes, items: Sequence[RawItem]) -> dict[str, Pairs]:
    """The key/value pairs a slice adds to each sub-database; each outcome's time index
    gets one sorted run (see :func:`put`)."""
    if accel.FOLD is None:
        return index_rows_py(qk, items)
    entries, by_job, bad, *runs = accel.FOLD.rows(qk, items, MAX_NAME_LENGTH, _terms, id_key)
    rows = {"entries": entries, "by_job": by_job, "quarantine": bad}
    for outcome, run in zip(BY.values(), runs, strict=True):
        run.sort()  # settle times nearly follow stream order: a near-linear sort
        rows[outcome] = run
    return rows


def _terms(fields: Mapping[str, str], line: bytes) -> tuple[str, str, int] | str:
    """(job, outcome, at) of an entry the accelerator leaves to Python, or the reason it
    is quarantined: exactly what :func:`index_rows_py` decides for it."""
    if ODD_TEXT not in line:
        return index_terms(fields)
    return malformed_reason(fields) or index_terms(fields)


def index_rows_py(qk: bytes, items: Sequence[RawItem]) -> dict[str, Pairs]:
    """:func:`index_rows` in Python: one tuple per index per entry, keys built from
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
        adds[outcome]((qk + U64(at_ms) + ik, b""))
    rows = {"entries": entries, "by_job": by_job, "quarantine": bad}
    for outcome, run in runs.items():
        run.sort()  # settle times nearly follow stream order: a near-linear sort
        rows[BY[outcome]] = run
    return rows


def put(txn: Txn, db: Any, pairs: Pairs, *, in_order: bool) -> int:
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
