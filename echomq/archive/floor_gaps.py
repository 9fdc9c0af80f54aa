"""The floor's gap records: stream entries lost before the floor took them.

A fold that finds a loss records it here and stops; an operator's acknowledgement
accepts it (its count joins the accounted entries) so folds go on. The gaps live in the
queue's state record (``floor_state``); these functions read and change them inside the
transaction the :class:`~echomq.archive.floor.Floor` opens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from echomq.archive.floor_state import load, save
from echomq.archive.lmdbstore import Dbs, Txn
from echomq.archive.stream_ids import ZERO_ID, id_key


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


def baseline(state: dict[str, Any]) -> GapBaseline:
    """What the queue's state says the stream is compared against."""
    acked = [g["upto"] for g in state.get("gaps", ()) if g.get("acknowledged_at")]
    upto = max(acked, key=id_key, default=ZERO_ID)
    return GapBaseline(str(state["checkpoint"]), state["accounted"], upto)


def listed(state: dict[str, Any], queue: str) -> list[Gap]:
    """Every loss recorded in the queue's state, acknowledged or not, oldest first."""
    return [_gap(queue, g) for g in state.get("gaps", ())]


def anchor(txn: Txn, dbs: Dbs, *, queue: str, checkpoint: str, accounted: int) -> None:
    """Set an unknown accounted count, if the checkpoint is still where it was measured."""
    state = load(txn, dbs, queue)
    if state["accounted"] is None and state["checkpoint"] == checkpoint:
        state["accounted"] = accounted
        save(txn, dbs, queue, state)


def record(txn: Txn, dbs: Dbs, *, queue: str, after: str, upto: str, count: int | None
           ) -> Gap:
    """Remember a loss (an open gap at the same checkpoint is updated, not repeated)."""
    state = load(txn, dbs, queue)
    gaps: list[dict[str, Any]] = state.setdefault("gaps", [])
    row = next((g for g in gaps if g["after"] == after and not g["acknowledged_at"]), None)
    if row is None:
        row = {"after": after, "found_at": int(time.time() * 1000),
               "acknowledged_at": None, "acknowledged_by": None, "note": ""}
        gaps.append(row)
    row.update(upto=upto, count=count)
    save(txn, dbs, queue, state)
    return _gap(queue, row)


def acknowledge(txn: Txn, dbs: Dbs, *, queue: str, by: str, note: str) -> list[Gap]:
    """Accept every open gap as lost: each one's count joins the accounted entries, so
    the same loss is not found again; the record stays, with who and when."""
    state = load(txn, dbs, queue)
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
        save(txn, dbs, queue, state)
    return done


def _gap(queue: str, row: dict[str, Any]) -> Gap:
    return Gap(queue, row["after"], row["upto"], row["count"], row["found_at"],
               row["acknowledged_at"], row["acknowledged_by"], row.get("note", ""))
