"""``wait``: a producer waits for one job's end without polling.

It subscribes to the queue's job news (setting the listener mark) BEFORE it reads
the job's row once: a job that settles before the read is seen finished by the read,
one that settles after it is heard. Nothing is read again until the job's end is
heard, except the row's existence, checked in the same round trip that renews the
mark (every few seconds): a job removed while waited on (``remove_job``, a cancel of
a pending job, ``drain``, ``obliterate``) raises ``JobGone`` at that check.
"""

from __future__ import annotations

import time
from typing import Literal

from echomq.errors import JobGone, WaitTimeout
from echomq.models import JobState
from echomq.queue import validate
from echomq.queue.admin import get_job
from echomq.queue.connection import Connection
from echomq.queue.events import ENDS
from echomq.queue.listen import Listener
from echomq.records import Job

Outcome = Literal["completed", "cancelled", "dead"]


def outcome(job: Job) -> Outcome | None:
    """How ``job`` ended, or None while it has not."""
    if job.state is JobState.DEAD:
        return "dead"
    if job.state is JobState.COMPLETED:
        return "cancelled" if job.cancelled else "completed"
    return None


def wait(conn: Connection, queue: str, job_id: str, timeout_s: float | None = None) -> Job:
    """Block until the job is completed, cancelled or dead, and return its row.

    A failure that will be retried is not an end. A job already finished returns at
    once; an unknown id raises ``JobGone`` at once, and so does a job removed while
    waited on (within a few seconds) or removed between its end and the read.
    ``timeout_s`` (seconds; None: no limit) raises ``WaitTimeout``, a ``TimeoutError``
    naming the job.
    """
    row = conn.keys(queue).job(job_id)  # the gate, before the wire
    limit = None if timeout_s is None else validate.positive_seconds(timeout_s, "timeout_s")
    deadline = None if limit is None else time.monotonic() + limit
    with Listener(conn, queue, job_news_only=True) as listener:
        job = get_job(conn, queue, job_id)
        if job is None:
            raise JobGone(f"wait: no job {job_id!r} in queue {queue!r}")
        while outcome(job) is None:
            event = listener.read(deadline)
            if event is None:
                if deadline is not None and time.monotonic() >= deadline:
                    raise WaitTimeout(queue, job_id, limit or 0.0)
                if not listener.renew(row):
                    raise JobGone(f"wait: job {job_id!r} of {queue!r} was removed "
                                  "before it finished")
                continue
            if event.job_id != job_id or event.kind not in ENDS:
                continue
            # heard its end: read it once (a dead job retried since then is waited on)
            found = get_job(conn, queue, job_id)
            if found is None:
                raise JobGone(f"wait: job {job_id!r} of {queue!r} was removed after "
                              "it finished")
            job = found
        return job
