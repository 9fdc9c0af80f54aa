"""The count-thresholded stalled sweep (the seed's ``EchoMQ.Stalled.check``).

Below ``max_stalled`` a lapsed job is recovered; at or above it, dead-lettered with
``last_error = "stalled"``. At the default of 1 the first counted stall
dead-letters: reap is the recover-once path, this is the give-up path.
"""

from __future__ import annotations

from echomq.models import StalledSweep
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys

DEFAULT_MAX_STALLED = 1
DEFAULT_LIMIT = 100
DEFAULT_INTERVAL_MS = 30_000


def stalled_check(
    conn: Connection, queue: str, max_stalled: int = DEFAULT_MAX_STALLED,
    limit: int = DEFAULT_LIMIT,
) -> StalledSweep:
    """Run ONE sweep over at most ``limit`` lapsed leases."""
    validate.positive_int(max_stalled, "max_stalled")
    validate.positive_int(limit, "limit")
    keys = Keys(queue)
    recovered, dead = conn.executor.run(
        "stalled_check", [keys.active, keys.pending, keys.dead], [keys.base, max_stalled, limit]
    )
    return StalledSweep(recovered=list(recovered), dead=list(dead))
