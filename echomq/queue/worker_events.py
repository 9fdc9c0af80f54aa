"""Counts of what happens to workers, per queue, for the Prometheus exposition: runs that
reached their timeout, runs settled without their thread or process (abandoned, killed),
worker child processes that died, were restarted, or were recycled on purpose.

Kept in the queue's ``metrics:workers`` hash beside the counters the settle scripts keep,
so a scrape reads them in the same pipeline; written by the worker (one HINCRBY per
event: these are rare), never on a job's hot path.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Literal

import redis

from echomq.errors import EchoMQError
from echomq.queue.connection import Connection

log = logging.getLogger("echomq.consumer")

WorkerEvent = Literal["timeouts", "abandoned", "killed", "died", "restarted", "recycled"]
WORKER_EVENTS: tuple[WorkerEvent, ...] = ("timeouts", "abandoned", "killed", "died",
                                          "restarted", "recycled")


def count(conn: Connection, queues: Iterable[str], event: WorkerEvent, n: int = 1) -> None:
    """Add ``n`` to ``event`` of each queue; a server that does not answer is logged, never
    raised (a count must not take a worker down)."""
    if event not in WORKER_EVENTS:
        raise ValueError(f"unknown worker event {event!r}")
    try:
        pipe = conn.redis.pipeline(transaction=False)
        for queue in queues:
            pipe.hincrby(conn.keys(queue).metric("workers"), event, n)
        pipe.execute()
    except (EchoMQError, redis.RedisError) as exc:
        log.warning("could not count %s: %s", event, exc)
