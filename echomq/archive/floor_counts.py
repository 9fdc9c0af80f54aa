"""Outcomes counted by time, from the floor's per-outcome time indexes, for charts.

Counting walks index keys only (``queue NUL, at, id``: no entry is read or parsed), one
time bucket at a time from the newest, and stops after ``budget`` keys: a chart over a
busy week costs a bounded read, and says how far back it got.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from echomq.archive.entries import Outcome
from echomq.archive.floor_rows import BY, U64
from echomq.archive.floor_state import queue_key
from echomq.archive.lmdbstore import Dbs, Txn

if TYPE_CHECKING:
    from echomq.archive.floor import Floor


@dataclass(frozen=True, slots=True)
class TimeCounts:
    """Outcomes settled in ``[start, start + step)`` for each counted bucket start."""

    step_ms: int
    counts: dict[int, dict[str, int]]
    """bucket start (ms) -> outcome -> count, for every bucket counted in full."""
    walked: int
    """Index keys read."""
    exhausted: bool
    """True when the budget ran out before every asked bucket was counted."""


def count_settled(txn: Txn, dbs: Dbs, queue: str, starts: list[int], step_ms: int,
                  budget: int) -> TimeCounts:
    """Count ``queue``'s outcomes in each bucket ``[s, s + step_ms)`` of ``starts``,
    newest first, reading at most ``budget`` index keys (a bucket the budget cuts short
    is left out)."""
    qk = queue_key(queue)
    width = len(qk)
    cursors = {o.value: txn.cursor(db=dbs[BY[o.value]]) for o in Outcome}
    counts: dict[int, dict[str, int]] = {}
    walked = 0
    for start in sorted(starts, reverse=True):
        end = start + step_ms
        found: dict[str, int] = {}
        for outcome, cur in cursors.items():
            n = 0
            if cur.set_range(qk + U64(max(start, 0))):
                for key in cast(Iterator[bytes], cur.iternext(keys=True, values=False)):
                    if not key.startswith(qk) or \
                            int.from_bytes(key[width:width + 8], "big") >= end:
                        break
                    n += 1
                    walked += 1
                    if walked > budget:
                        return TimeCounts(step_ms, counts, walked - 1, True)
            found[outcome] = n
        counts[start] = found
    return TimeCounts(step_ms, counts, walked, False)


def floor_counts(floor: Floor, queue: str, starts: list[int], step_ms: int, *, budget: int
                 ) -> TimeCounts:
    """:func:`count_settled` in one read snapshot of ``floor``."""
    with floor.store.read() as (txn, dbs):
        return count_settled(txn, dbs, queue, starts, step_ms, budget)
