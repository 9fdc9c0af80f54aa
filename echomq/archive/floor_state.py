"""The floor's per-queue state: one JSON record a queue, read and written in a transaction.

Each queue has one record in the ``queues`` sub-database (checkpoint, counts, gaps, the
base a prune left, the last fold's time). Every part of the floor that changes it does so
inside one write transaction: ``load``, change, ``save``; nothing is cached between them,
so a transaction always sees what the last committed one left.
"""

from __future__ import annotations

import json
from typing import Any, cast

from echomq.archive.lmdbstore import Dbs, Txn
from echomq.archive.stream_ids import ZERO_ID, id_lt
from echomq.queue.keys import check_name


def queue_key(queue: str) -> bytes:
    """The prefix of every key of ``queue`` (``queue NUL``: names hold no control
    character), checked so no name can reach into another queue's keys."""
    return check_name(queue, "queue name").encode() + b"\x00"


def load(txn: Txn, dbs: Dbs, queue: str) -> dict[str, Any]:
    """The queue's record (a fresh one before its first slice)."""
    raw = txn.get(queue.encode(), db=dbs["queues"])
    if raw is None:
        return {"checkpoint": ZERO_ID, "entries": 0, "quarantined": 0, "slices": 0,
                "pending": 0, "trimmed_through": ZERO_ID, "accounted": 0}
    state: dict[str, Any] = json.loads(cast(bytes, raw))
    if "accounted" not in state:  # a floor from before the count: known only when empty
        state["accounted"] = 0 if state["checkpoint"] == ZERO_ID else None
    return state


def save(txn: Txn, dbs: Dbs, queue: str, state: dict[str, Any]) -> None:
    txn.put(queue.encode(), json.dumps(state).encode(), db=dbs["queues"])


def base(state: dict[str, Any]) -> tuple[str, str]:
    """(through, digest) of what a prune forgot (``0-0`` before any prune)."""
    found = state.get("base") or {}
    return str(found.get("through", ZERO_ID)), str(found.get("digest", ""))


def note_trim(txn: Txn, dbs: Dbs, *, queue: str, through: str) -> None:
    """Raise the queue's ``trimmed_through`` to ``through`` (never lower it)."""
    state = load(txn, dbs, queue)
    if id_lt(state["trimmed_through"], through):
        state["trimmed_through"] = through
        save(txn, dbs, queue, state)


def note_fold(txn: Txn, dbs: Dbs, *, queue: str, seconds: float, at_ms: int) -> None:
    """Keep how long the queue's last completed fold took, and when it ended."""
    state = load(txn, dbs, queue)
    state["last_fold"] = {"seconds": seconds, "at": at_ms}
    save(txn, dbs, queue, state)


def last_fold(state: dict[str, Any]) -> tuple[float, int] | None:
    found = state.get("last_fold")
    return None if found is None else (float(found["seconds"]), int(found["at"]))


def note_verify(txn: Txn, dbs: Dbs, *, queue: str, ok: bool, at_ms: int, detail: str) -> None:
    """Keep the last verify of the queue's bucket chain: when, whether it held, and what
    it found (the dashboard shows it without reading the bucket)."""
    state = load(txn, dbs, queue)
    state["last_verify"] = {"ok": ok, "at": at_ms, "detail": detail[:500]}
    save(txn, dbs, queue, state)


def last_verify(state: dict[str, Any]) -> dict[str, Any] | None:
    found = state.get("last_verify")
    return None if found is None else dict(found)
