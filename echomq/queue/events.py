"""Events on ``emq:{q}:events``: fire-and-forget pub/sub, at most once.

A publish with no live subscriber is lost; nothing here is a delivery guarantee.
The Consumer uses it for cancel signals and to wake when jobs arrive.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from echomq.queue.connection import Connection


@dataclass(frozen=True)
class Event:
    event: str
    job_id: str | None = None
    reason: str | None = None

    @classmethod
    def decode(cls, data: str | bytes) -> Event | None:
        """The event in a message, or None for anything that is not one of ours."""
        try:
            raw: Any = json.loads(data)
        except (TypeError, ValueError):
            return None
        if not isinstance(raw, dict) or not isinstance(raw.get("event"), str):
            return None
        job, reason = raw.get("job"), raw.get("reason")
        if not isinstance(job, str | None) or not isinstance(reason, str | None):
            return None
        return cls(raw["event"], job, reason)

    def encode(self) -> str:
        body: dict[str, str] = {"event": self.event}
        if self.job_id is not None:
            body["job"] = self.job_id
        if self.reason is not None:
            body["reason"] = self.reason
        return json.dumps(body, separators=(",", ":"))


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
