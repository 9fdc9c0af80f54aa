"""Keyspace dumps: every key of one queue, comparable between runs and executors.

A dump is every key of one queue, named relative to the queue's base (so two queues
driven through the same steps can be compared), with its type and its contents.
``normalise`` replaces what legitimately differs between two runs: wall-clock
timestamps (a cron schedule's ``created_at`` too), lease deadlines, stream ids, the buckets of
the duration histograms, the charts' snapshots (named by their minute: left out), and
(kept aside) the ``lease_epoch`` field that only the functions executor stamps.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from echomq.queue.keys import Keys

# A score at or above this is a millisecond timestamp (2001 onwards), not a priority/seq.
_TIME_FLOOR = 1_000_000_000_000
TIME_FIELDS = frozenset({"created_at", "claimed_at", "finished_at", "at", "started_at",
                         "entry", "folded"})
_TIME_JSON = frozenset({"errors", "logs"})
"""Fields holding a JSON array of objects each with its own server time ``at``."""
_TIME_SCORED = frozenset({"scheduled", "active", "completed", "dead", "waiting", "rlog",
                          "rparked"})
# Histograms of durations: which bucket a time lands in depends on the clock, so only
# how many observations each holds is compared.
_TIME_HISTOGRAMS = frozenset({"metrics:run", "metrics:wait"})


def dump(client: redis.Redis, queue: str) -> dict[str, tuple[str, Any]]:
    """Every key of ``queue``: ``{suffix: (type, contents)}``, suffix relative to the base."""
    base = Keys(queue).base
    out: dict[str, tuple[str, Any]] = {}
    for key in sorted(client.scan_iter(match=base + "*", count=1000)):
        kind = client.type(key)
        content: Any
        if kind == "hash":
            content = client.hgetall(key)
        elif kind == "zset":
            content = client.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            content = sorted(client.smembers(key))
        elif kind == "list":
            content = client.lrange(key, 0, -1)
        elif kind == "string":
            content = client.get(key)
        elif kind == "stream":
            content = client.xrange(key)
        else:  # pragma: no cover - a type the queue never writes
            raise AssertionError(f"unexpected {kind} at {key}")
        out[key.removeprefix(base)] = (kind, content)
    return out


def normalise(raw: dict[str, tuple[str, Any]]) -> dict[str, tuple[str, Any]]:
    """A dump with times, deadlines and stream ids made comparable; ``lease_epoch`` dropped."""
    out: dict[str, tuple[str, Any]] = {}
    for name, (kind, content) in raw.items():
        if name.startswith("chart:"):
            continue  # the charts' snapshots: named by the minute, holding the histograms
        if kind == "hash" and name in _TIME_HISTOGRAMS:
            buckets = sum(int(v) for f, v in content.items() if f not in ("sum", "count"))
            content = {"count": content.get("count"), "in buckets": buckets}
        elif kind == "hash" and name == "schedules":  # name -> spec JSON with its created_at
            content = {f: {**json.loads(v), "created_at": "<t>"} for f, v in content.items()}
            content = {f: {k: "<t>" if k in ("paused_at", "resumed_at") else x
                           for k, x in spec.items()} for f, spec in content.items()}
        elif kind == "hash":
            content = {
                f: ("<t>" if f in TIME_FIELDS else timeless(v) if f in _TIME_JSON else v)
                for f, v in content.items()
                if f != "lease_epoch"
            }
        elif kind == "zset" and name in _TIME_SCORED:
            content = [(m, "<t>" if s >= _TIME_FLOOR else s) for m, s in content]
        elif kind == "stream":
            content = [
                {f: ("<t>" if f in TIME_FIELDS else timeless(v) if f in _TIME_JSON else v)
                 for f, v in fields.items()}
                for _, fields in content
            ]
        out[name] = (kind, content)
    return out


def epochs(raw: dict[str, tuple[str, Any]]) -> dict[str, str]:
    """``{row key suffix: lease_epoch}`` for every row that carries one."""
    return {
        name: content["lease_epoch"]
        for name, (kind, content) in raw.items()
        if kind == "hash" and name.startswith("job:") and "lease_epoch" in content
    }


def timeless(text: str) -> Any:
    """A JSON array of timed objects (a row's ``errors`` or ``logs``), decoded with each
    ``at`` made ``<t>``."""
    return [{**item, "at": "<t>"} for item in json.loads(text)]
