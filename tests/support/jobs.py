"""Reading a job the test knows exists."""

from __future__ import annotations

import echomq
from echomq.queue.connection import Connection


def existing_job(conn: Connection, queue: str, job_id: str) -> echomq.Job:
    """``get_job`` of a job that must be there: a failed assertion names it if not."""
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None, f"no job {job_id!r} on {queue!r}"
    return job
