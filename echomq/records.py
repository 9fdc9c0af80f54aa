"""The records the read verbs return (``get_job``, ``counts``, ``retention``, ``purge``,
``schedules``, ``workers``): frozen dataclasses, apart from the few values a worker meets
(:mod:`echomq.models`), so a worker's start does not build them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from echomq.models import CANCELLED_PREFIX, JobState, id_list


@dataclass(frozen=True)
class AttemptError:
    """One failed attempt's error, as the row's ``errors`` keep it (the last 10)."""

    at: int | None
    """When it failed, in ms since the epoch on the server's clock."""
    attempt: int | None
    """The attempt (the claim's token) that failed."""
    type: str
    """The exception class's qualified name ("" for a failure given as a string)."""
    message: str
    traceback: str
    """The formatted traceback, its last 8 KiB ("" for a failure given as a string)."""


@dataclass(frozen=True)
class LogLine:
    """One ``job.log`` line, as the row's ``logs`` keep it (the last 100, 64 KiB)."""

    at: int | None
    """When it was logged, in ms since the epoch on the server's clock."""
    attempt: int | None
    """The attempt (the claim's token) that logged it."""
    text: str


def _objects(text: str | None) -> list[dict[str, Any]]:
    """A row's JSON array of objects (``errors``, ``logs``); [] when absent or not an
    array (a row written by another client is read, never refused)."""
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def attempt_errors(text: str | None) -> list[AttemptError]:
    """The row's ``errors`` field decoded, oldest first."""
    return [AttemptError(at=_int_or_none(e.get("at")), attempt=_int_or_none(e.get("attempt")),
                         type=str(e.get("type") or ""), message=str(e.get("message") or ""),
                         traceback=str(e.get("traceback") or ""))
            for e in _objects(text)]


def log_lines(text: str | None) -> list[LogLine]:
    """The row's ``logs`` field decoded, oldest first."""
    return [LogLine(at=_int_or_none(e.get("at")), attempt=_int_or_none(e.get("attempt")),
                    text=str(e.get("text") or ""))
            for e in _objects(text)]


def _result(text: str | None) -> tuple[Any, str | None]:
    """``(result, cancel_reason)`` from the row's stored result: a cancelled job's is
    ``cancelled:<reason>`` (no JSON text starts so); anything else is JSON, decoded (a
    text that is not JSON, written by another client, is returned as it is)."""
    if text is None:
        return None, None
    if text.startswith(CANCELLED_PREFIX):
        return None, text[len(CANCELLED_PREFIX):]
    try:
        return json.loads(text), None
    except ValueError:
        return text, None


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
    result: Any
    """What its handler returned, decoded from JSON (like ``payload``); None while it has
    not completed, and for a cancelled job (see ``cancel_reason``)."""
    last_error: str | None
    lease_epoch: str | None
    created_at: int | None
    claimed_at: int | None
    finished_at: int | None
    entry: str | None
    """The outcome stream entry that recorded how it finished (recording queues only)."""
    retried: int
    """How many times ``retry_dead`` brought it back from the dead set."""
    progress: Any
    """The last value its handler gave ``job.progress`` (decoded JSON; None if never)."""
    replay_of: str | None
    """``"<queue>/<id>"`` of the archived job this one replays (``archive.replay``)."""
    raw: dict[str, str] = field(repr=False, compare=False)
    cancel_reason: str | None = None
    """A cancelled job's reason ("" when none was given); None when it was not cancelled."""
    errors: list[AttemptError] = field(default_factory=list)
    """Each failed attempt's error, oldest first (the last 10 attempts)."""
    logs: list[LogLine] = field(default_factory=list)
    """Its ``job.log`` lines, oldest first (the last 100 lines, 64 KiB)."""
    dedup_id: str | None = None
    """The dedup id it was added under (``add(..., dedup_id=...)``); None when none."""
    debounced: int = 0
    """How many debounce adds replaced its payload while it waited."""
    parent: str | None = None
    """The flow's job that waits for this one (a chord's ``then``, a chain's next step)."""
    children: list[str] = field(default_factory=list)
    """The jobs this flow parent waits for, in order (``echomq.children``)."""

    @property
    def cancelled(self) -> bool:
        """True for a job settled as cancelled."""
        return self.cancel_reason is not None

    @classmethod
    def from_row(cls, job_id: str, row: dict[str, str]) -> Job:
        def num(name: str) -> int | None:
            value = row.get(name)
            return int(value) if value not in (None, "") else None

        payload_text = row.get("payload")
        progress_text = row.get("progress")
        result, cancel_reason = _result(row.get("result"))
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
            result=result,
            last_error=row.get("last_error"),
            lease_epoch=row.get("lease_epoch"),
            created_at=num("created_at"),
            claimed_at=num("claimed_at"),
            finished_at=num("finished_at"),
            entry=row.get("entry"),
            retried=num("retried") or 0,
            progress=json.loads(progress_text) if progress_text is not None else None,
            replay_of=row.get("replay_of"),
            raw=dict(row),
            cancel_reason=cancel_reason,
            errors=attempt_errors(row.get("errors")),
            logs=log_lines(row.get("logs")),
            dedup_id=row.get("dedup"),
            debounced=num("debounced") or 0,
            parent=row.get("parent"),
            children=id_list(row.get("children")),
        )


@dataclass(frozen=True)
class Counts:
    """Jobs per state, and whether the queue is paused (``pause``: claims hand out nothing)."""

    pending: int
    scheduled: int
    active: int
    completed: int
    dead: int
    paused: bool = False
    waiting: int = 0
    """A flow's parents waiting for their children."""

    def as_dict(self) -> dict[str, int | bool]:
        """Every count and ``paused``; ``waiting`` only when a flow's parents wait (so the
        shape of a queue without flows is as it always was)."""
        out: dict[str, int | bool] = {
            "pending": self.pending,
            "scheduled": self.scheduled,
            "active": self.active,
            "completed": self.completed,
            "dead": self.dead,
            "paused": self.paused,
        }
        if self.waiting:
            out["waiting"] = self.waiting
        return out


@dataclass(frozen=True)
class Retention:
    """A queue's retention policy (None: no limit of that kind). A finished row goes once
    it is past either limit of its state: older than ``<state>_age_ms`` or beyond the
    newest ``<state>_count``; on a declared queue only once the archive folded it."""

    completed_age_ms: int | None = None
    completed_count: int | None = None
    dead_age_ms: int | None = None
    dead_count: int | None = None

    def limits(self, state: str) -> tuple[int | None, int | None]:
        """``(age_ms, count)`` for ``state`` ("completed" or "dead")."""
        if state == "completed":
            return self.completed_age_ms, self.completed_count
        return self.dead_age_ms, self.dead_count

    @property
    def empty(self) -> bool:
        return all(v is None for v in self.as_dict().values())

    def as_dict(self) -> dict[str, int | None]:
        return {"completed_age_ms": self.completed_age_ms,
                "completed_count": self.completed_count,
                "dead_age_ms": self.dead_age_ms, "dead_count": self.dead_count}


@dataclass(frozen=True)
class Purged:
    """One purge's answer: rows forgotten, and finished rows it would have forgotten but
    kept because the archive has not folded their outcomes yet."""

    state: str
    forgotten: int = 0
    kept_for_archive: int = 0

    def __add__(self, other: Purged) -> Purged:
        return Purged(self.state, self.forgotten + other.forgotten,
                      max(self.kept_for_archive, other.kept_for_archive))


@dataclass(frozen=True)
class Schedule:
    """One cron schedule of a queue (``echomq.schedules``); times are epoch ms, server clock."""

    name: str
    cron: str
    timezone: str
    payload: Any
    options: dict[str, Any]
    """The add options every fire uses: delay_ms, priority, max_attempts, group, name."""
    created_at: int
    """When it was stored (or last replaced): it never fires for a time before this."""
    next_fire_at: int | None
    """The first fire time after both now and the last fire (None: it never fires again)."""
    last_fire_at: int | None
    """The latest fire time a scheduler enqueued (None: not fired yet)."""
    paused_at: int | None = None
    """When it was paused (``pause_schedule``): no fire while paused, and none for the
    times it missed once resumed. None: it fires."""
    recent_fires: tuple[int, ...] = ()
    """The latest fire times a scheduler enqueued, newest first (at most 10): each one's
    job is ``cron-<name>-<time>``."""

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def recent_job_ids(self) -> tuple[str, ...]:
        """The ids of the jobs of :attr:`recent_fires`, newest first."""
        return tuple(f"cron-{self.name}-{at}" for at in self.recent_fires)


@dataclass(frozen=True)
class HeldJob:
    """A job a worker said it held at its last beat, by the fencing token of its claim."""

    queue: str
    id: str
    token: int


@dataclass(frozen=True)
class WorkerInfo:
    """One worker's heartbeat record (``echomq.workers``): what it said of itself at its
    last beat. Times are epoch ms on the server clock."""

    id: str
    kind: str
    """``consumer`` (a plain Consumer), ``worker`` (an App's), ``child`` (one process of an
    App worker with ``processes=N``) or ``supervisor`` (the parent of those)."""
    host: str
    pid: int
    parent_pid: int | None
    queues: tuple[str, ...]
    queue_count: int
    """How many queues it serves (:attr:`queues` lists the first 100)."""
    tasks: tuple[str, ...]
    concurrency: int
    held: tuple[HeldJob, ...]
    """The jobs it held at its last beat (the first 100; :attr:`held_count` says how many)."""
    held_count: int
    started_at: int
    last_beat_at: int
    beat_ms: int
    version: str
    alive: bool
    """False once its last beat is older than a few beats (``GONE_BEATS``): it stopped
    without saying so (kill -9, a lost host); its record lapses a while later."""
    seen_at: int
    """The server time this record was read at."""

    @property
    def silent_ms(self) -> int:
        """How long since its last beat, at :attr:`seen_at`."""
        return max(0, self.seen_at - self.last_beat_at)
