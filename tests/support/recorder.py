"""The stream recorder: outcome entries written exactly as the queue's Lua writes them."""

from __future__ import annotations

import json

from echomq.archive.stream_ids import id_key
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys

OUTCOMES = ("completed", "cancelled", "dead")


class Recorder:
    """Writes outcome entries into a queue's stream exactly as the queue's Lua does."""

    def __init__(self, conn: Connection, queue: str) -> None:
        self.conn = conn
        self.queue = queue
        self.key = Keys(queue).completions
        self.written: list[tuple[str, dict[str, str]]] = []
        self._n = 0

    def add(self, count: int, at: int = 1_700_000_000_000) -> list[str]:
        pipe = self.conn.redis.pipeline(transaction=False)
        batch = []
        for _ in range(count):
            i = self._n
            self._n += 1
            outcome = OUTCOMES[i % 3]
            result = {"completed": json.dumps({"n": i}), "cancelled": f"reason {i}",
                      "dead": f"boom {i}"}[outcome]
            fields = {"job": f"job-{i}", "outcome": outcome, "result": result,
                      "attempts": str(1 + i % 4), "at": str(at + i), "created_at": str(at)}
            batch.append(fields)
            pipe.xadd(self.key, fields)
        ids = pipe.execute()
        self.written += list(zip(ids, batch, strict=True))
        return list(ids)

    def malformed(self, fields: dict[str, str] | None = None) -> str:
        fields = fields or {"job": "broken", "outcome": "exploded", "attempts": "x"}
        sid = self.conn.redis.xadd(self.key, fields)
        self.written.append((sid, fields))
        return str(sid)

    def written_ids(self) -> list[str]:
        """Every id this recorder wrote, in stream order."""
        return sorted((sid for sid, _ in self.written), key=id_key)

    def stream_ids(self) -> list[str]:
        return [sid for sid, _ in self.conn.redis.xrange(self.key)]
