"""The workers' heartbeat records, read: ``echomq.workers`` and the dashboard's Workers.

Every live Consumer (and an App worker's supervisor and each of its children) writes a
small record on its beat (``worker_beat-2.lua``, in the round trip of its lease renewal):
one hash per worker that lapses ``KEEP_BEATS`` beats after its last one (the writer's
constants are in ``transitions/heartbeat.py``), and the prefix's set of worker ids scored
by when each record lapses (trimmed on every beat).
Both keys carry the prefix's hash tag, so a beat writes one slot on a Cluster. A worker
that stops gracefully removes its record; one that was killed leaves it, shown as gone
once its last beat is :data:`GONE_BEATS` beats old, until it lapses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from echomq.queue.cluster import slot_ms
from echomq.queue.connection import Connection
from echomq.queue.keys import check_name, worker_record, workers_set
from echomq.records import HeldJob, WorkerInfo

GONE_BEATS = 3
"""A worker whose last beat is older than this many of its beats is shown as gone."""
MAX_WORKERS = 1_000
"""The most records one read returns (the most recently beating first)."""


def workers(conn: Connection, q: str | None = None, *, limit: int = MAX_WORKERS
            ) -> list[WorkerInfo]:
    """Every worker of the connection's prefix that beat lately (or only those serving
    queue ``q``): alive, or gone (stopped beating without a stop) until its record lapses.
    Sorted by host, then pid; at most ``limit`` records are read. Three round trips."""
    if q is not None:
        check_name(q, "queue name")
    key = workers_set(conn.prefix)
    now = slot_ms(conn.redis, key)
    ids = cast(list[str], conn.redis.zrangebyscore(key, f"({now}", "+inf", start=0,
                                                   num=limit))
    if not ids:
        return []
    pipe = conn.redis.pipeline(transaction=False)
    for worker_id in ids:
        pipe.hgetall(worker_record(conn.prefix, worker_id))
    found = [parse(row, now) for row in pipe.execute() if row]
    return sorted((w for w in found if w is not None and (q is None or q in w.queues)),
                  key=lambda w: (w.host, w.pid, w.id))


def _int(row: Mapping[str, str], name: str, default: int = 0) -> int:
    try:
        return int(row.get(name, default))
    except ValueError:
        return default


def _names(text: str | None) -> tuple[str, ...]:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _held(text: str | None) -> tuple[HeldJob, ...]:
    try:
        value = json.loads(text or "[]")
        return tuple(HeldJob(str(q), str(i), int(t)) for q, i, t in value)
    except (ValueError, TypeError):
        return ()


def parse(row: Mapping[str, str], now: int) -> WorkerInfo | None:
    """A record as a :class:`WorkerInfo` (None for one without an id: a stray hash)."""
    if not row.get("id"):
        return None
    beat_ms = max(1, _int(row, "beat_ms", 1))
    last = _int(row, "last_beat")
    queues = _names(row.get("queues"))
    held = _held(row.get("held"))
    parent = _int(row, "parent_pid")
    return WorkerInfo(
        id=row["id"], kind=row.get("kind", "consumer"), host=row.get("host", ""),
        pid=_int(row, "pid"), parent_pid=parent or None, queues=queues,
        queue_count=_int(row, "queue_count", len(queues)), tasks=_names(row.get("tasks")),
        concurrency=_int(row, "concurrency"), held=held,
        held_count=_int(row, "held_count", len(held)), started_at=_int(row, "started"),
        last_beat_at=last, beat_ms=beat_ms, version=row.get("version", ""),
        alive=now - last <= GONE_BEATS * beat_ms, seen_at=now)


def held_states(conn: Connection, held: tuple[HeldJob, ...]) -> list[dict[str, Any]]:
    """What became of jobs a worker held, read now (one round trip): ``state`` (``gone``:
    the row was removed) and ``held``: still active under that worker's claim (its token
    is the row's attempts), so its lease has not been recovered yet."""
    if not held:
        return []
    pipe = conn.redis.pipeline(transaction=False)
    for job in held:
        pipe.hmget(conn.keys(job.queue).job(job.id), "state", "attempts")
    out = []
    for job, (state, attempts) in zip(held, pipe.execute(), strict=True):
        still = state == "active" and attempts is not None and int(attempts) == job.token
        out.append({"queue": job.queue, "id": job.id, "token": job.token,
                    "state": state or "gone", "held": still})
    return out
