"""The producer's verbs, awaited: ``add``, ``add_many``, ``get_job``, ``cancel_request``.

Each builds its call with the sync verb's own plan or builder (the gates of
:mod:`echomq.queue.enqueue`, the catalogue :mod:`echomq.queue.transitions`) and reads the
reply with the same parser: a bad argument is refused before the wire with the same
error, a reply means the same thing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from echomq import tracing
from echomq.aio.connection import AsyncConnection
from echomq.queue.admin import job_of
from echomq.queue.dedup import DedupMode
from echomq.queue.enqueue import DEFAULT_MAX_ATTEMPTS, AddPlan, plan_add, plan_add_many
from echomq.queue.transitions import intake, steering
from echomq.queue.transitions.steering import CancelOutcome
from echomq.records import Job


async def add(conn: AsyncConnection, queue: str, payload: Any, *, job_id: str | None = None,
              delay_ms: int = 0, priority: int = 0, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
              group: str | None = None, name: str | None = None,
              dedup_id: str | None = None, dedup_ttl_ms: int | None = None,
              dedup_mode: DedupMode = "until_done") -> str:
    """:func:`echomq.add`, awaited: enqueue one job, its id (idempotent with ``job_id``,
    deduplicated with ``dedup_id``: the same modes, gates and call).

    Adds that coroutines make in the same turn of the event loop share one round trip
    (a deduplicated add is sent on its own)."""
    plan = plan_add(conn.keys(queue), conn.payload_limit, payload, job_id=job_id,
                    delay_ms=delay_ms, priority=priority, max_attempts=max_attempts,
                    group=group, name=name, dedup_id=dedup_id, dedup_ttl_ms=dedup_ttl_ms,
                    dedup_mode=dedup_mode)
    if tracing.current() is not None or plan.dedup is not None:  # a call of its own
        return (await _send(conn, queue, plan))[0]
    # sent with the other adds of this turn of the event loop (echomq.aio.batch)
    return await conn.adds.add(plan.keys, plan.options, (job_id or "", plan.bodies[0]))


async def add_many(conn: AsyncConnection, queue: str, payloads: Iterable[Any], *,
                   job_ids: Iterable[str] | None = None, delay_ms: int = 0,
                   priority: int = 0, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                   group: str | None = None, name: str | None = None,
                   dedup_id: str | None = None) -> list[str]:
    """:func:`echomq.add_many`, awaited: one round trip per 1,000 jobs, every payload
    checked before the first is sent (``dedup_id`` refused, as there)."""
    plan = plan_add_many(conn.keys(queue), conn.payload_limit, payloads, job_ids=job_ids,
                         delay_ms=delay_ms, priority=priority, max_attempts=max_attempts,
                         group=group, name=name, dedup_id=dedup_id)
    return await _send(conn, queue, plan)


async def _send(conn: AsyncConnection, queue: str, plan: AddPlan) -> list[str]:
    traced = tracing.current()
    if traced is None:
        return await _batches(conn, plan, "")
    with traced.add(queue, len(plan.bodies)) as traceparent:
        return await _batches(conn, plan, traceparent)


async def _batches(conn: AsyncConnection, plan: AddPlan, traceparent: str) -> list[str]:
    out: list[str] = []
    for call in plan.calls(traceparent):
        out.extend(intake.added(await conn.executor.run(*call)))
    return out


async def get_job(conn: AsyncConnection, queue: str, job_id: str) -> Job | None:
    """:func:`echomq.get_job`, awaited: the job's row, or None."""
    key = conn.keys(queue).job(job_id)  # the gate, before the wire
    row = await conn.redis.hgetall(key)
    return job_of(job_id, cast(dict[str, str], row))


async def cancel_request(conn: AsyncConnection, queue: str, job_id: str,
                         reason: str | None = None) -> CancelOutcome:
    """:func:`echomq.cancel.request`, awaited: ``"removed"`` (pending or scheduled) or
    ``"signalled"`` (active: its worker's token fires); ``NotCancellable`` for a finished
    job, ``JobGone`` for none."""
    call = steering.cancel_call(conn.keys(queue), job_id, reason)
    return steering.cancelled(await conn.executor.run(*call), job_id)
