"""add and add_many: jobs in, one round trip per batch."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from echomq import tracing
from echomq.errors import InvalidArgument
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.dedup import Dedup, DedupMode, dedup_of
from echomq.queue.executors import Call
from echomq.queue.keys import Keys, check_name
from echomq.queue.transitions import intake
from echomq.queue.transitions.dedup import add_dedup_call

DEFAULT_MAX_ATTEMPTS = 3
BATCH = 1000
"""Jobs per add call in add_many: large enough to amortise the round trip,
small enough that one script never blocks the server for long."""


def option_args(
    delay_ms: int, priority: int, max_attempts: int, group: str | None, name: str | None
) -> list[str | int]:
    """add's options, gated, in the order add-2.lua (and cron_fire-4.lua) read them."""
    validate.non_negative_int(delay_ms, "delay_ms")
    validate.priority(priority)
    validate.positive_int(max_attempts, "max_attempts")
    if group is not None:
        check_name(group, "group")
    if name is not None and not isinstance(name, str):
        raise InvalidArgument("name must be a str")
    return [delay_ms, priority, max_attempts, group or "", name or ""]


@dataclass(frozen=True)
class AddPlan:
    """One ``add`` or ``add_many``, gated and ready to send: the sync verbs here and
    ``echomq.aio`` build their calls from it (:meth:`calls`) and read each reply with
    :func:`echomq.queue.intake.added`, so the gates and the wire shape are written once."""

    keys: Keys
    options: list[str | int]
    bodies: list[str]
    ids: list[str] | None
    dedup: Dedup | None = None
    """An add under a dedup id (one job): sent by ``add_dedup-3.lua``."""

    def calls(self, traceparent: str = "") -> Iterator[Call]:
        """The add calls, one per ``BATCH`` jobs."""
        if self.dedup is not None:
            yield add_dedup_call(self.keys, self.options, self.ids[0] if self.ids else "",
                                 self.bodies[0], self.dedup, traceparent)
            return
        for start in range(0, len(self.bodies), BATCH):
            jobs = [(self.ids[start + offset] if self.ids else "", body)
                    for offset, body in enumerate(self.bodies[start : start + BATCH])]
            yield intake.add_call(self.keys, self.options, jobs, traceparent)


def plan_add(keys: Keys, payload_limit: int, payload: Any, *, job_id: str | None = None,
             delay_ms: int = 0, priority: int = 0, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
             group: str | None = None, name: str | None = None,
             dedup_id: str | None = None, dedup_ttl_ms: int | None = None,
             dedup_mode: DedupMode = "until_done") -> AddPlan:
    """``add``'s gates, before the wire: the id, the options, the dedup, the payload."""
    if job_id is not None:
        keys.job(job_id)  # the gate, before the wire
    options = option_args(delay_ms, priority, max_attempts, group, name)
    dedup = dedup_of(keys, dedup_id, dedup_ttl_ms, dedup_mode)
    body = validate.payload_json(payload, payload_limit)
    return AddPlan(keys, options, [body], None if job_id is None else [job_id], dedup)


def plan_add_many(keys: Keys, payload_limit: int, payloads: Iterable[Any], *,
                  job_ids: Iterable[str] | None = None, delay_ms: int = 0, priority: int = 0,
                  max_attempts: int = DEFAULT_MAX_ATTEMPTS, group: str | None = None,
                  name: str | None = None, dedup_id: str | None = None) -> AddPlan:
    """``add_many``'s gates: every payload and id checked before the first batch is sent."""
    if dedup_id is not None:
        raise InvalidArgument("add_many does not deduplicate: add each job with "
                              "add(..., dedup_id=...)")
    options = option_args(delay_ms, priority, max_attempts, group, name)
    bodies = [validate.payload_json(p, payload_limit) for p in payloads]
    ids_in = list(job_ids) if job_ids is not None else None
    for job_id in ids_in or ():
        keys.job(job_id)  # the gate, before the wire
    if ids_in is not None and len(ids_in) != len(bodies):
        raise InvalidArgument("job_ids and payloads must have the same length")
    return AddPlan(keys, options, bodies, ids_in)


def add(
    conn: Connection,
    queue: str,
    payload: Any,
    *,
    job_id: str | None = None,
    delay_ms: int = 0,
    priority: int = 0,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    group: str | None = None,
    name: str | None = None,
    dedup_id: str | None = None,
    dedup_ttl_ms: int | None = None,
    dedup_mode: DedupMode = "until_done",
) -> str:
    """Enqueue one job and return its id.

    With ``job_id`` the add is idempotent: if that id exists, its id is returned
    and nothing changes. ``delay_ms`` > 0 schedules it; a lower ``priority`` runs
    first (0 is the most urgent); ``group`` puts it in that group's lane.

    With ``dedup_id`` the add is deduplicated, atomically on the server: while a job
    holds that id, no job is added and the holder's id is returned. ``dedup_mode``
    says how long a job holds it: ``"until_done"`` (until it completes, is cancelled,
    dies or is removed; ``dedup_ttl_ms``, if given, is an upper bound), ``"ttl"`` (for
    ``dedup_ttl_ms`` from the first add, whatever the job does) or ``"debounce"`` (as
    until_done, and an add while the job is still pending or scheduled replaces its
    payload and restarts its delay; an active job is left as it is, its id returned).
    See :mod:`echomq.queue.dedup`.
    """
    plan = plan_add(conn.keys(queue), conn.payload_limit, payload, job_id=job_id,
                    delay_ms=delay_ms, priority=priority, max_attempts=max_attempts,
                    group=group, name=name, dedup_id=dedup_id, dedup_ttl_ms=dedup_ttl_ms,
                    dedup_mode=dedup_mode)
    traced = tracing.current()
    if traced is None:
        return intake.added(conn.executor.run(*next(plan.calls())))[0]
    with traced.add(queue, 1) as traceparent:
        return intake.added(conn.executor.run(*next(plan.calls(traceparent))))[0]


def add_many(
    conn: Connection,
    queue: str,
    payloads: Iterable[Any],
    *,
    job_ids: Iterable[str] | None = None,
    delay_ms: int = 0,
    priority: int = 0,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    group: str | None = None,
    name: str | None = None,
    dedup_id: str | None = None,
) -> list[str]:
    """Enqueue many jobs with the same options, one round trip per ``BATCH`` jobs.

    Every payload is checked before the first batch is sent, so a bad one adds nothing.
    ``dedup_id`` is refused: a dedup id is one job's (use :func:`add` per job).
    """
    plan = plan_add_many(conn.keys(queue), conn.payload_limit, payloads, job_ids=job_ids,
                         delay_ms=delay_ms, priority=priority, max_attempts=max_attempts,
                         group=group, name=name, dedup_id=dedup_id)
    traced = tracing.current()
    if traced is None:
        return _add_batches(conn, plan, "")
    with traced.add(queue, len(plan.bodies)) as traceparent:
        return _add_batches(conn, plan, traceparent)


def _add_batches(conn: Connection, plan: AddPlan, traceparent: str) -> list[str]:
    out: list[str] = []
    for call in plan.calls(traceparent):
        out.extend(intake.added(conn.executor.run(*call)))
    return out
