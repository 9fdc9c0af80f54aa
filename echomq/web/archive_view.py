"""What the archive page shows per queue: the floor's state against the stream's.

The lag is what the outcome stream holds past the floor's checkpoint: in entries (the
stream's ``entries-added`` less what the floor accounted for, O(1); a bounded count
when the floor cannot tell) and in seconds (the age of the first entry not yet folded,
read from its stream id). "Uploaded through" is the last id the floor holds that is
also in the remote (``Floor.safe_trim_point``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from echomq.archive import floor_notes
from echomq.archive.entries import Outcome
from echomq.archive.floor import Floor, FloorStatus
from echomq.archive.floor_gaps import Gap
from echomq.archive.stream_read import read_ids, stream_info
from echomq.queue.connection import Connection

COUNT_BOUND = 10_000
"""The most stream entries counted one by one when the floor's count is unknown."""


@dataclass(frozen=True)
class ArchiveRow:
    """One queue on the archive page."""

    queue: str
    declared: bool
    status: FloorStatus
    stream_length: int | None
    lag_entries: int | None
    lag_exact: bool
    lag_ms: int | None
    uploaded_through: str
    gaps: tuple[Gap, ...]
    last_fold: tuple[float, int] | None = None
    """(seconds it took, ms it ended) of the floor's last completed fold of the queue."""
    last_verify: dict[str, Any] | None = None
    """The last ``archive verify`` against this floor: ``{"ok", "at", "detail"}``."""

    @property
    def checkpoint_ms(self) -> int | None:
        """The checkpoint as a time: a stream id's first part is ms on the server clock."""
        head = self.status.checkpoint.split("-")[0]
        return int(head) if head.isdigit() and head != "0" else None


def archive_names(conn: Connection, floor: Floor) -> list[str]:
    """Every queue that is declared or held by the floor, sorted by name."""
    declared = {str(q) for q in conn.redis.smembers(conn.declared_set)}
    return sorted(declared | set(floor.queues()))


def archive_rows(conn: Connection, floor: Floor, now_ms: int,
                 names: list[str] | None = None) -> list[ArchiveRow]:
    """The rows of ``names`` (by default every queue of :func:`archive_names`): the page
    passes one page of them."""
    if names is None:
        names = archive_names(conn, floor)
    declared = conn.redis.smismember(conn.declared_set, names) if names else []
    return [_row(conn, floor, q, bool(d), now_ms)
            for q, d in zip(names, declared, strict=True)]


def _row(conn: Connection, floor: Floor, queue: str, declared: bool, now_ms: int
         ) -> ArchiveRow:
    status = floor.status(queue)
    stream = conn.keys(queue).completions
    info = stream_info(conn.redis, stream) or {}
    length = int(info["length"]) if info else None
    lag, exact, lag_ms = _lag(conn, floor, queue, stream, info, now_ms)
    return ArchiveRow(queue, declared, status, length, lag, exact, lag_ms,
                      floor.safe_trim_point(queue, with_remote=True),
                      tuple(floor.gaps(queue)), floor.last_fold(queue),
                      floor_notes.last_verify(floor, queue))


def _lag(conn: Connection, floor: Floor, queue: str, stream: str, info: dict[str, Any],
         now_ms: int) -> tuple[int | None, bool, int | None]:
    """(entries past the checkpoint, whether that count is exact, age of the oldest)."""
    if not info:
        return None, True, None
    base = floor.gap_baseline(queue)
    nxt = read_ids(conn.redis, stream, f"({base.checkpoint}", 1)
    lag_ms = max(0, now_ms - int(nxt[0].split("-")[0])) if nxt else None
    if not nxt:
        return 0, True, None
    if base.accounted is not None and "entries-added" in info:
        return max(0, int(info["entries-added"]) - base.accounted), True, lag_ms
    batch = read_ids(conn.redis, stream, f"({base.checkpoint}", COUNT_BOUND)
    return len(batch), len(batch) < COUNT_BOUND, lag_ms


def audit(floor: Floor, queue: str, *, outcome: str | None, since: int | None,
          until: int | None, job_id: str | None, limit: int) -> list[dict[str, Any]]:
    """Archived outcomes matching the search, oldest first, at most ``limit``."""
    if job_id:
        found = [e for e in floor.history(queue, job_id)
                 if (outcome is None or e.outcome == Outcome(outcome))
                 and (since is None or e.at >= since) and (until is None or e.at < until)]
        return [e.to_dict() for e in found[:limit]]
    return [e.to_dict() for e in floor.audit(queue, outcome, since, until, limit)]
