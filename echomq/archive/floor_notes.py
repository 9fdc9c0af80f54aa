"""What the dashboard asks a floor beyond its status: a job's last outcome (what a replay
takes) in one cursor step, and the last verify of a queue's bucket chain, kept in the
queue's record by ``archive.verify`` so a page shows it without reading the bucket."""

from __future__ import annotations

from typing import Any

from echomq.archive import floor_reads
from echomq.archive import floor_state as state_of
from echomq.archive.entries import ArchivedEntry
from echomq.archive.floor import Floor


def last_outcome(floor: Floor, queue: str, job_id: str) -> ArchivedEntry | None:
    """The job's last archived outcome (None when it has none), however often it ran."""
    return floor._read(floor_reads.last_of_job, queue, job_id)


def record_verify(floor: Floor, queue: str, ok: bool, at_ms: int, detail: str) -> None:
    """Remember the last verify of ``queue``'s bucket chain: when, whether it held, what
    it found."""
    floor._write(state_of.note_verify, queue=queue, ok=ok, at_ms=at_ms, detail=detail)


def last_verify(floor: Floor, queue: str) -> dict[str, Any] | None:
    """``{"ok", "at", "detail"}`` of the last verify against this floor, None before one."""
    return state_of.last_verify(floor._state(queue))
