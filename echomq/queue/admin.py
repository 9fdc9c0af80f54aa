"""Reads and settings an operator uses: get_job, counts, group limits, metrics.

Forgetting finished rows (purge, retention) lives in :mod:`echomq.queue.retention`."""

from __future__ import annotations

from typing import cast

from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.transitions import steering
from echomq.records import Counts, Job


def get_job(conn: Connection, queue: str, job_id: str) -> Job | None:
    row = cast(dict[str, str], conn.redis.hgetall(conn.keys(queue).job(job_id)))
    return job_of(job_id, row)


def job_of(job_id: str, row: dict[str, str]) -> Job | None:
    """A job's ``HGETALL`` reply as its ``Job`` (None: no row), for ``get_job`` and
    ``echomq.aio.get_job`` alike."""
    return Job.from_row(job_id, row) if row else None


def counts(conn: Connection, queue: str) -> Counts:
    """Jobs per state (pending includes every group's lane) and whether it is paused."""
    keys = conn.keys(queue)
    pipe = conn.redis.pipeline(transaction=False)
    for key in (keys.pending, keys.scheduled, keys.active, keys.completed, keys.dead,
                keys.waiting):
        pipe.zcard(key)
    pipe.smembers(keys.groups)
    pipe.hexists(keys.meta, "paused")
    pending, scheduled, active, completed, dead, waiting, groups, paused = pipe.execute()
    if groups:
        pipe = conn.redis.pipeline(transaction=False)
        for group in groups:
            pipe.zcard(keys.lane(group))
        pending += sum(pipe.execute())
    return Counts(pending, scheduled, active, completed, dead, bool(paused), waiting)


def set_group_limit(conn: Connection, queue: str, group: str, limit: int) -> None:
    """How many jobs of ``group`` may be active at once (1 when never set).

    Takes effect at the next claim: a raised limit lets the group's waiting jobs run
    without waiting for a held one to settle.
    """
    conn.executor.run(*steering.group_limit_call(conn.keys(queue), group, limit))


OUTCOMES = ("completed", "cancelled", "retried", "dead")
"""How a settled attempt ended, one name per meaning: ``completed`` (the handler returned),
``cancelled`` (it honoured a cancel), ``retried`` (it failed, that is raised, and another try
is scheduled), ``dead`` (dead-lettered: it failed on its last try or for good, or stalled
at the threshold). A *failed* attempt is one whose handler raised: ``retried`` or ``dead``."""


def metrics(conn: Connection, queue: str) -> dict[str, int]:
    """Lifetime totals of settled attempts per outcome (:data:`OUTCOMES`): counters kept
    by the settle scripts, never lowered by a purge, retention or the archive (the rows in
    each state now are :func:`counts`)."""
    raw = cast(dict[str, str], conn.redis.hgetall(conn.keys(queue).metric("finished")))
    return {outcome: int(raw.get(outcome, 0)) for outcome in OUTCOMES}


def dead_jobs(conn: Connection, queue: str, limit: int = 100) -> list[str]:
    """Up to ``limit`` dead-lettered ids, oldest first: every dead-letter (a failure past
    ``max_attempts`` or a stall at the threshold) is scored by when it died, server clock."""
    validate.positive_int(limit, "limit")
    return [str(i) for i in conn.redis.zrange(conn.keys(queue).dead, 0, limit - 1)]
