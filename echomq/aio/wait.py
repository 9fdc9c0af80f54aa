"""``aio.wait``: :func:`echomq.wait`, awaited; the event loop runs on while it waits.

The same protocol: the job's news is subscribed to (the mark set first) before its row is
read once; its end is heard, then read. The waits of one queue on one connection share
one subscription (:mod:`echomq.aio.hub`), so ten thousand open waits hold one
connection, not ten thousand. A subscription dropped and made again may have missed the
end: every wait reads its row again then. A job removed while waited on is found by an
``EXISTS`` every few seconds (``JobGone``).
"""

from __future__ import annotations

import asyncio
import time

import redis

from echomq.aio.connection import AsyncConnection
from echomq.aio.hub import LOST
from echomq.aio.verbs import get_job
from echomq.errors import ConnectionFailed, JobGone, WaitTimeout
from echomq.queue import validate
from echomq.queue.events import RENEW_S
from echomq.queue.wait import outcome
from echomq.records import Job


async def wait(conn: AsyncConnection, queue: str, job_id: str,
               timeout_s: float | None = None) -> Job:
    """Until the job is completed, cancelled or dead: its row. ``JobGone`` for an unknown
    id or a job removed while waited on; ``WaitTimeout`` after ``timeout_s`` seconds."""
    row = conn.keys(queue).job(job_id)  # the gate, before the wire
    limit = None if timeout_s is None else validate.positive_seconds(timeout_s, "timeout_s")
    deadline = None if limit is None else time.monotonic() + limit
    hub, inbox = await conn.hubs.join(conn, queue, job_id)
    try:
        job = await get_job(conn, queue, job_id)
        if job is None:
            raise JobGone(f"wait: no job {job_id!r} in queue {queue!r}")
        while outcome(job) is None:
            left = RENEW_S if deadline is None else min(RENEW_S, deadline - time.monotonic())
            try:
                item = await asyncio.wait_for(inbox.get(), max(left, 0.0))
            except TimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise WaitTimeout(queue, job_id, limit or 0.0) from None
                if not await _exists(conn, row):
                    raise JobGone(f"wait: job {job_id!r} of {queue!r} was removed "
                                  "before it finished") from None
                continue
            if isinstance(item, BaseException):
                raise item
            # heard its end (or maybe missed it: LOST): read it once
            found = await get_job(conn, queue, job_id)
            if found is None:
                raise JobGone(f"wait: job {job_id!r} of {queue!r} was removed "
                              f"{'while waited on' if item == LOST else 'after it finished'}")
            job = found
        return job
    finally:
        await conn.hubs.leave(hub, job_id, inbox)


async def _exists(conn: AsyncConnection, row: str) -> bool:
    """Whether the waited job's row is still there (the sync wait's check, on renewal)."""
    try:
        return bool(await conn.redis.exists(row))
    except redis.ConnectionError as exc:
        raise ConnectionFailed(f"lost the server while waiting: {exc}") from exc
