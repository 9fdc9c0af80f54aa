"""The values verbs return: frozen dataclasses and the state enum."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class JobState(StrEnum):
    PENDING = "pending"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    COMPLETED = "completed"
    DEAD = "dead"


@dataclass(frozen=True)
class ClaimedJob:
    """A job a worker now holds. ``token`` is the fencing token every settle needs."""

    id: str
    token: int
    payload: Any
    lease_deadline_ms: int

    @property
    def attempts(self) -> int:
        """The claim count: the token is the row's ``attempts`` at claim time."""
        return self.token


@dataclass(frozen=True)
class Job:
    """A snapshot of one job's row (``get_job``)."""

    id: str
    state: JobState
    attempts: int
    stalled: int
    payload: Any
    priority: int
    max_attempts: int
    group: str | None
    name: str | None
    result: str | None
    last_error: str | None
    lease_epoch: str | None
    created_at: int | None
    claimed_at: int | None
    finished_at: int | None
    entry: str | None
    """The outcome stream entry that recorded how it finished (recording queues only)."""
    retried: int
    """How many times ``retry_dead`` brought it back from the dead set."""
    raw: dict[str, str] = field(repr=False, compare=False)

    @classmethod
    def from_row(cls, job_id: str, row: dict[str, str]) -> Job:
        def num(name: str) -> int | None:
            value = row.get(name)
            return int(value) if value not in (None, "") else None

        payload_text = row.get("payload")
        return cls(
            id=job_id,
            state=JobState(row["state"]) if "state" in row else JobState.DEAD,
            attempts=num("attempts") or 0,
            stalled=num("stalled") or 0,
            payload=json.loads(payload_text) if payload_text is not None else None,
            priority=num("priority") or 0,
            max_attempts=num("max_attempts") or 0,
            group=row.get("group"),
            name=row.get("name"),
            result=row.get("result"),
            last_error=row.get("last_error"),
            lease_epoch=row.get("lease_epoch"),
            created_at=num("created_at"),
            claimed_at=num("claimed_at"),
            finished_at=num("finished_at"),
            entry=row.get("entry"),
            retried=num("retried") or 0,
            raw=dict(row),
        )


@dataclass(frozen=True)
class StalledSweep:
    """One sweep's answer: ids recovered to pending and ids dead-lettered."""

    recovered: list[str]
    dead: list[str]


@dataclass(frozen=True)
class Counts:
    """Jobs per state, and whether the queue is paused (``pause``: claims hand out nothing)."""

    pending: int
    scheduled: int
    active: int
    completed: int
    dead: int
    paused: bool = False

    def as_dict(self) -> dict[str, int | bool]:
        return {
            "pending": self.pending,
            "scheduled": self.scheduled,
            "active": self.active,
            "completed": self.completed,
            "dead": self.dead,
            "paused": self.paused,
        }


@dataclass(frozen=True)
class CancelVerdict:
    """Return this from a handler to settle its job as ``cancelled:<reason>``."""

    reason: str | None = None
