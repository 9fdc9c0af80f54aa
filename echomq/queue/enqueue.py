"""add and add_many: jobs in, one round trip per batch."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from echomq import tracing
from echomq.errors import InvalidArgument
from echomq.queue import transitions, validate
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys, check_name

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
) -> str:
    """Enqueue one job and return its id.

    With ``job_id`` the add is idempotent: if that id exists, its id is returned
    and nothing changes. ``delay_ms`` > 0 schedules it; a lower ``priority`` runs
    first (0 is the most urgent); ``group`` puts it in that group's lane.
    """
    keys = conn.keys(queue)
    if job_id is not None:
        keys.job(job_id)  # the gate, before the wire
    options = option_args(delay_ms, priority, max_attempts, group, name)
    body = validate.payload_json(payload, conn.payload_limit)
    traced = tracing.current()
    if traced is None:
        call = transitions.add_call(keys, options, [(job_id or "", body)])
        return transitions.added(conn.executor.run(*call))[0]
    with traced.add(queue, 1) as traceparent:
        call = transitions.add_call(keys, options, [(job_id or "", body)], traceparent)
        return transitions.added(conn.executor.run(*call))[0]


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
) -> list[str]:
    """Enqueue many jobs with the same options, one round trip per ``BATCH`` jobs.

    Every payload is checked before the first batch is sent, so a bad one adds nothing.
    """
    keys = conn.keys(queue)
    options = option_args(delay_ms, priority, max_attempts, group, name)
    bodies = [validate.payload_json(p, conn.payload_limit) for p in payloads]
    ids_in = list(job_ids) if job_ids is not None else None
    for job_id in ids_in or ():
        keys.job(job_id)  # the gate, before the wire
    if ids_in is not None and len(ids_in) != len(bodies):
        raise InvalidArgument("job_ids and payloads must have the same length")
    traced = tracing.current()
    if traced is None:
        return _add_batches(conn, keys, options, bodies, ids_in, "")
    with traced.add(queue, len(bodies)) as traceparent:
        return _add_batches(conn, keys, options, bodies, ids_in, traceparent)


def _add_batches(conn: Connection, keys: Keys, options: list[str | int], bodies: list[str],
                 ids_in: list[str] | None, traceparent: str) -> list[str]:
    out: list[str] = []
    for start in range(0, len(bodies), BATCH):
        jobs = [(ids_in[start + offset] if ids_in else "", body)
                for offset, body in enumerate(bodies[start : start + BATCH])]
        call = transitions.add_call(keys, options, jobs, traceparent)
        out.extend(transitions.added(conn.executor.run(*call)))
    return out
