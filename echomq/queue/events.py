"""Events: fire-and-forget pub/sub, at most once.

Two channels per queue. ``emq:{q}:events`` carries what every Consumer must hear
(``added`` wakeups, ``cancel`` requests, ``paused``/``resumed``). ``emq:{q}:job-events``
carries per-job news (``progress`` always; ``completed``, ``cancelled``, ``failed``,
``dead`` only while the listener mark exists): Consumers never subscribe to it, so a
busy queue's news never wakes them. A publish with no live subscriber is lost;
nothing here is a delivery guarantee.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from echomq.queue.connection import Connection

LISTEN_TTL_MS = 20_000
"""How long the listener mark outlives its last renewal (a listener that died)."""
RENEW_S = 5.0
"""How often a live listener renews its mark: well inside the TTL."""


class EventKind(StrEnum):
    """Every kind of event a queue publishes."""

    ADDED = "added"
    PAUSED = "paused"
    RESUMED = "resumed"
    CANCEL = "cancel"
    """A cancel was requested for an active job (``echomq.cancel.request``)."""
    PROGRESS = "progress"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    """The job settled as cancelled (a completion with result ``cancelled:<reason>``)."""
    FAILED = "failed"
    """The handler failed and a retry is scheduled (``reason``: the error)."""
    DEAD = "dead"
    """The job was dead-lettered (``reason``: the error, or ``stalled``)."""


JOB_KINDS = frozenset(EventKind) - {EventKind.ADDED, EventKind.PAUSED, EventKind.RESUMED}
"""The kinds that are about one job: a message of these kinds without a job is malformed."""
ENDS = frozenset({EventKind.COMPLETED, EventKind.CANCELLED, EventKind.DEAD})
"""The kinds that end a job's life (what ``wait`` waits for)."""


@dataclass(frozen=True)
class Event:
    """One event: its kind (``event``: the wire name), the job it is about, a reason
    (a cancel's, an error) and a value (a ``progress`` event's decoded JSON)."""

    event: str
    job_id: str | None = None
    reason: str | None = None
    value: Any = field(default=None, hash=False)

    @property
    def kind(self) -> EventKind | None:
        """The event's kind, or None for a name this version does not know."""
        try:
            return EventKind(self.event)
        except ValueError:
            return None

    @classmethod
    def decode(cls, data: str | bytes) -> Event | None:
        """The event in a message, or None for anything that is not one of ours."""
        try:
            raw: Any = json.loads(data)
        except (TypeError, ValueError, RecursionError):
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("event"), str):
            return None
        job, reason = raw.get("job"), raw.get("reason")
        if not isinstance(job, str | None) or not isinstance(reason, str | None):
            return None
        return cls(raw["event"], job, reason, raw.get("value"))

    @classmethod
    def typed(cls, data: str | bytes) -> Event | None:
        """The event in a message if its kind is known and well formed (a job event
        names its job), else None: what ``events`` and ``wait`` act on."""
        event = cls.decode(data)
        if event is None or event.kind is None:
            return None
        if event.kind in JOB_KINDS and not event.job_id:
            return None
        return event

    def encode(self) -> str:
        body: dict[str, Any] = {"event": self.event}
        if self.job_id is not None:
            body["job"] = self.job_id
        if self.reason is not None:
            body["reason"] = self.reason
        if self.value is not None:
            body["value"] = self.value
        return json.dumps(body, separators=(",", ":"))


def progress_message(job_id: str, value_json: str) -> str:
    """A ``progress`` event around a value already encoded (the text the row stores)."""
    return f'{{"event":"progress","job":{json.dumps(job_id)},"value":{value_json}}}'


def publish(
    conn: Connection, queue: str, event: str, job_id: str | None = None, reason: str | None = None
) -> int:
    """Publish one event; returns how many subscribers received it."""
    keys = conn.keys(queue)
    if job_id is not None:
        keys.job(job_id)
    return int(conn.redis.publish(keys.events, Event(event, job_id, reason).encode()))


def channel(conn: Connection, queue: str) -> str:
    """The pub/sub channel of ``queue``'s events under ``conn``'s prefix."""
    return conn.keys(queue).events
