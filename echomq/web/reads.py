"""What the pages show, read from Redis: every read is a count or a bounded range.

A queue of a million jobs costs the same as one of ten: ``ZCARD``, ``ZCOUNT`` over a
score range, ``ZRANGE`` of one page and one ``HGETALL`` per row on that page, in one
pipeline. Nothing here walks a whole set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import echomq
from echomq.models import JobState
from echomq.queue.connection import Connection
from echomq.records import Counts, Job

WINDOWS_MIN = (1, 5, 15)
"""The throughput windows of the overview, in minutes."""

STATES = tuple(s.value for s in JobState)


@dataclass(frozen=True)
class Window:
    """Outcomes settled in the last ``minutes``: completed and dead-lettered."""

    minutes: int
    completed: int
    dead: int

    @property
    def per_minute(self) -> float:
        return (self.completed + self.dead) / self.minutes

    @property
    def failure_rate(self) -> float | None:
        """Dead over finished, or None when nothing finished."""
        done = self.completed + self.dead
        return self.dead / done if done else None


@dataclass(frozen=True)
class QueueSummary:
    """One row of the overview."""

    name: str
    counts: Counts
    paused: bool
    declared: bool
    windows: tuple[Window, ...]
    oldest_pending_ms: int | None
    """Age of the job at the head of the pending line (server clock), None when empty."""


def server_ms(conn: Connection) -> int:
    """Now on the server's clock: the clock the scripts score finished jobs with."""
    seconds, micros = conn.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def summary(conn: Connection, queue: str, now_ms: int, declared: bool) -> QueueSummary:
    """One queue's counts, throughput windows, pause state and head-of-line age."""
    keys = conn.keys(queue)
    counts = echomq.counts(conn, queue)
    pipe = conn.redis.pipeline(transaction=False)
    for minutes in WINDOWS_MIN:
        low = now_ms - minutes * 60_000
        pipe.zcount(keys.completed, low, "+inf")
        pipe.zcount(keys.dead, low, "+inf")
    pipe.zrange(keys.pending, 0, 0)
    replies = pipe.execute()
    windows = tuple(Window(m, int(replies[2 * i]), int(replies[2 * i + 1]))
                    for i, m in enumerate(WINDOWS_MIN))
    head = replies[-1]
    oldest = None
    if head:
        created = conn.redis.hget(keys.job(str(head[0])), "created_at")
        if created:
            oldest = max(0, now_ms - int(created))
    return QueueSummary(queue, counts, counts.paused, declared, windows, oldest)


def job_page(conn: Connection, queue: str, state: str, page: int, per_page: int
             ) -> list[Job]:
    """One page of ``state``'s jobs, newest first (``echomq.list_jobs``)."""
    return echomq.list_jobs(conn, queue, state, start=page * per_page, count=per_page,
                            newest_first=True)


def pretty_value(value: Any) -> str:
    """A decoded value as indented JSON text (a string stays a JSON string)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def pretty(value: Any) -> str:
    """A payload or a result as indented JSON text (a string that is JSON is parsed)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)




def known(conn: Connection, queue: str) -> bool:
    """Whether anything of ``queue`` exists: a key of its own (its sets, stream, meta,
    sequence, schedules) or a place in the declared or retained set. One ``EXISTS`` (every
    key of a queue shares its slot) and two ``SISMEMBER``: what tells an unknown name from
    an empty queue."""
    keys = conn.keys(queue)
    own = (keys.pending, keys.scheduled, keys.active, keys.completed, keys.dead,
           keys.completions, keys.meta, keys.seq, keys.ring, keys.groups, keys.schedules)
    if int(conn.redis.exists(*own)):
        return True
    return bool(conn.redis.sismember(conn.declared_set, queue)
                or conn.redis.sismember(conn.retained_set, queue))


OPENING_ORDER = ("pending", "active", "scheduled", "dead", "completed")
"""The state a queue page opens on: the first of these that holds a job."""


def opening_state(counts: dict[str, int]) -> str:
    """``pending`` when it holds jobs, else the first state in ``OPENING_ORDER`` that does
    (``pending`` for an empty queue)."""
    return next((s for s in OPENING_ORDER if counts.get(s)), "pending")


def scores(conn: Connection, queue: str, state: str, ids: list[str]) -> list[float | None]:
    """Each job's score in ``state``'s set, one ``ZMSCORE``: a scheduled job's due time, a
    running one's lease deadline (both ms, server clock); None for the other states."""
    if state not in ("scheduled", "active") or not ids:
        return [None] * len(ids)
    keys = conn.keys(queue)
    found = conn.redis.zmscore(keys.scheduled if state == "scheduled" else keys.active, ids)
    return [None if s is None else float(s) for s in found]
