"""The operator's steering verbs: pause and resume a queue, promote a scheduled job,
bring dead jobs back. Each is one transition of :mod:`echomq.queue.transitions`
(``retry_dead`` loops over batches, so no call touches more than ~1,000 keys).
"""

from __future__ import annotations

from collections.abc import Sequence

from echomq.errors import InvalidArgument, QueueBusy
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.transitions import steering


def pause(conn: Connection, queue: str) -> bool:
    """Stop ``queue`` handing out jobs: claim's script answers nothing to any Consumer,
    old or new, until :func:`resume`. Held jobs run on and settle; ``add`` still works.
    Publishes ``paused``; returns False when it was already paused."""
    return steering.toggled(conn.executor.run(*steering.pause_call(conn.keys(queue))))


def resume(conn: Connection, queue: str) -> bool:
    """Let a paused queue hand out jobs again; publishes ``resumed`` and the ``added``
    wakeup, so idle Consumers claim at once. Returns False when it was not paused.

    Raises :class:`~echomq.errors.QueueBusy`, changing nothing, while an obliterate of
    ``queue`` is under way or was interrupted (its rows are half gone): obliterate it
    again to finish, then the name is free."""
    try:
        reply = conn.executor.run(*steering.resume_call(conn.keys(queue)))
    except QueueBusy as exc:
        raise QueueBusy(f"resume {queue!r}: the queue is being obliterated (or an obliterate "
                        "was interrupted); obliterate it again to finish") from exc
    return steering.toggled(reply)


def is_paused(conn: Connection, queue: str) -> bool:
    """Whether ``queue`` is paused (a flag in its meta hash; one HEXISTS)."""
    keys = conn.keys(queue)
    return bool(conn.redis.hexists(keys.meta, "paused"))


def promote(conn: Connection, queue: str, job_id: str) -> None:
    """Make a scheduled job (delayed, or a retry waiting on its backoff) pending now, in
    its priority order. ``JobGone`` when there is no such job, ``NotScheduled`` when it
    is pending, active or finished."""
    call = steering.promote_call(conn.keys(queue), job_id)
    steering.promoted(conn.executor.run(*call), job_id)


def retry_dead(
    conn: Connection, queue: str, job_ids: Sequence[str] | None = None, *,
    limit: int = steering.RETRY_BATCH,
) -> int:
    """Dead jobs back to pending; returns how many moved.

    ``job_ids=None`` takes every dead job, oldest first, ``limit`` per call until none
    are left; otherwise the given ids, of which any that is not dead is skipped. Each
    keeps its ``last_error``, counts one more ``retried`` and gets its tries against
    ``max_attempts`` afresh; its ``attempts`` (the fencing token) never goes down, so a
    zombie handler of an earlier attempt stays refused. Grouped jobs rejoin their lane.
    """
    validate.positive_int(limit, "limit")
    if limit > steering.RETRY_BATCH:
        raise InvalidArgument(f"limit must be at most {steering.RETRY_BATCH}, got {limit}")
    keys = conn.keys(queue)
    if job_ids is None:
        total = 0
        while True:
            moved, scanned = steering.retried(
                conn.executor.run(*steering.retry_dead_call(keys, None, limit)))
            total += moved
            if scanned < limit:
                return total
    if isinstance(job_ids, str | bytes):
        raise InvalidArgument("job_ids must be a sequence of ids, not one string")
    ids = list(job_ids)
    calls = [steering.retry_dead_call(keys, ids[i:i + limit], limit)
             for i in range(0, len(ids), limit)]  # every id is gated before any call runs
    return sum(steering.retried(conn.executor.run(*call))[0] for call in calls)
