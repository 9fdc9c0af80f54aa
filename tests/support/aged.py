"""Outcome entries recorded long ago: explicit stream ids in the past, for retention tests."""

from __future__ import annotations

import json
import time

from tests.support.recorder import Recorder

DAY_MS = 86_400_000


def add_aged(rec: Recorder, days_ago: float, count: int) -> list[str]:
    """``count`` outcome entries recorded ``days_ago`` days ago (one ms apart), written as
    the queue's Lua writes them, with stream ids of that time."""
    start = int(time.time() * 1000 - days_ago * DAY_MS)
    ids = []
    for i in range(count):
        n = len(rec.written)
        at = start + i
        fields = {"job": f"job-{n}", "outcome": "completed", "result": json.dumps({"n": n}),
                  "attempts": "1", "at": str(at), "created_at": str(at)}
        sid = str(rec.conn.redis.xadd(rec.key, fields, id=f"{at}-0"))
        rec.written.append((sid, fields))
        ids.append(sid)
    return ids
