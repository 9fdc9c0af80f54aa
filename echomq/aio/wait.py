"""``aio.wait``: :func:`echomq.wait`, awaited; the event loop runs on while it waits.

The same protocol: subscribed (the mark set first) before the row is read once; the end
is heard, then read. A subscription dropped and made again may have missed the end: the
row is read again then.
"""

from __future__ import annotations

import time

from echomq.aio.connection import AsyncConnection
from echomq.aio.listen import AsyncListener
from echomq.aio.verbs import get_job
from echomq.errors import JobGone, WaitTimeout
from echomq.models import Job
from echomq.queue import validate
from echomq.queue.events import ENDS
from echomq.queue.wait import outcome


async def wait(conn: AsyncConnection, queue: str, job_id: str,
               timeout_s: float | None = None) -> Job:
    """Until the job is completed, cancelled or dead: its row. ``JobGone`` for an unknown
    id or a job removed while waited on; ``WaitTimeout`` after ``timeout_s`` seconds."""
    row = conn.keys(queue).job(job_id)  # the gate, before the wire
    limit = None if timeout_s is None else validate.positive_seconds(timeout_s, "timeout_s")
    deadline = None if limit is None else time.monotonic() + limit
    listener = await AsyncListener(conn, queue, job_news_only=True).open()
    try:
        job = await get_job(conn, queue, job_id)
        if job is None:
            raise JobGone(f"wait: no job {job_id!r} in queue {queue!r}")
        while outcome(job) is None:
            event = await listener.read(deadline)
            if event is None:
                if deadline is not None and time.monotonic() >= deadline:
                    raise WaitTimeout(queue, job_id, limit or 0.0)
                if listener.lost:  # the end may have been published while we were away
                    listener.lost = False
                else:
                    if not await listener.renew(row):
                        raise JobGone(f"wait: job {job_id!r} of {queue!r} was removed "
                                      "before it finished")
                    continue
            elif event.job_id != job_id or event.kind not in ENDS:
                continue
            found = await get_job(conn, queue, job_id)
            if found is None:
                raise JobGone(f"wait: job {job_id!r} of {queue!r} was removed after "
                              "it finished")
            job = found
        return job
    finally:
        await listener.close()
