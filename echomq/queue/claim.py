"""claim: up to ``count`` jobs under one lease, in ONE round trip."""

from __future__ import annotations

import json

from echomq.errors import InvalidArgument
from echomq.models import ClaimedJob
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.transitions import intake

DEFAULT_LEASE_MS = 30_000
MAX_CLAIM = 1000
"""Jobs per claim call: one script never holds the server for long."""


def claim(
    conn: Connection, queue: str, lease_ms: int = DEFAULT_LEASE_MS, count: int = 1
) -> list[ClaimedJob]:
    """Promote due scheduled jobs, then claim up to ``count``.

    Each claim increments the row's ``attempts``, which is the job's fencing token,
    and scores the active set at server ``TIME`` + ``lease_ms``: the score is the lease.
    A queue whose rate limit is full (or that a handler's ``RateLimited`` holds back)
    answers ``[]`` (:func:`echomq.set_rate_limit`).
    """
    validate.positive_int(lease_ms, "lease_ms")
    validate.positive_int(count, "count")
    if count > MAX_CLAIM:
        raise InvalidArgument(f"count must be at most {MAX_CLAIM}, got {count}")
    flat = conn.executor.run(*intake.claim_call(conn.keys(queue), lease_ms, count))
    if not flat:
        return []
    deadline = int(flat[0])
    return [ClaimedJob(job_id, token, json.loads(raw), deadline, name or None)
            for job_id, token, raw, name in intake.claimed(flat)]
