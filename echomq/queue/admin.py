"""Reads and settings an operator uses: get_job, counts, group limits, metrics."""

from __future__ import annotations

from typing import cast

from echomq.errors import InvalidArgument
from echomq.models import Counts, Job
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.keys import check_name


def get_job(conn: Connection, queue: str, job_id: str) -> Job | None:
    row = cast(dict[str, str], conn.redis.hgetall(conn.keys(queue).job(job_id)))
    return Job.from_row(job_id, row) if row else None


def counts(conn: Connection, queue: str) -> Counts:
    """Jobs per state (pending includes every group's lane) and whether it is paused."""
    keys = conn.keys(queue)
    pipe = conn.redis.pipeline(transaction=False)
    for key in (keys.pending, keys.scheduled, keys.active, keys.completed, keys.dead):
        pipe.zcard(key)
    pipe.smembers(keys.groups)
    pipe.hexists(keys.meta, "paused")
    pending, scheduled, active, completed, dead, groups, paused = pipe.execute()
    if groups:
        pipe = conn.redis.pipeline(transaction=False)
        for group in groups:
            pipe.zcard(keys.lane(group))
        pending += sum(pipe.execute())
    return Counts(pending, scheduled, active, completed, dead, bool(paused))


def set_group_limit(conn: Connection, queue: str, group: str, limit: int) -> None:
    """How many jobs of ``group`` may be active at once (1 when never set).

    Takes effect at the next claim: a raised limit lets the group's waiting jobs run
    without waiting for a held one to settle.
    """
    validate.positive_int(limit, "limit")
    keys = conn.keys(queue)
    conn.executor.run(
        "group_limit", [keys.glimits], [keys.base, check_name(group, "group"), limit]
    )


def metrics(conn: Connection, queue: str) -> dict[str, int]:
    keys = conn.keys(queue)
    pipe = conn.redis.pipeline(transaction=False)
    for name in ("completed", "failed"):
        pipe.hget(keys.metric(name), "count")
    completed, failed = pipe.execute()
    return {"completed": int(completed or 0), "failed": int(failed or 0)}


def dead_jobs(conn: Connection, queue: str, limit: int = 100) -> list[str]:
    """Up to ``limit`` dead-lettered ids, oldest first: every dead-letter (a failure past
    ``max_attempts`` or a stall at the threshold) is scored by when it died, server clock."""
    validate.positive_int(limit, "limit")
    return [str(i) for i in conn.redis.zrange(conn.keys(queue).dead, 0, limit - 1)]


PURGE_BATCH = 1000


def purge(conn: Connection, queue: str, state: str = "dead", keep: int = 0) -> int:
    """Forget finished jobs of ``state`` ("completed" or "dead") beyond the newest
    ``keep`` (newest by when they finished or died): their rows and set entries leave
    Redis; a declared stream's archive keeps their history. Returns how many were deleted."""
    if state not in ("completed", "dead"):
        raise InvalidArgument(f"state must be 'completed' or 'dead', got {state!r}")
    validate.non_negative_int(keep, "keep")
    keys = conn.keys(queue)
    state_key = keys.completed if state == "completed" else keys.dead
    total = 0
    while True:
        n = int(conn.executor.run("purge", [state_key], [keys.base, keep, PURGE_BATCH]))
        total += n
        if n < PURGE_BATCH:
            return total
