"""Waiting on a real server: poll with a deadline, never sleep a guessed time.

Leases are scored on the server clock, so a wait for a lapse reads that clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from echomq.queue.keys import Keys


def server_ms(client: redis.Redis) -> int:
    """The server clock in milliseconds (the clock leases are scored on)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, step: float = 0.005) -> Any:
    """Poll ``predicate`` until it answers something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(step)


def wait_lapsed(client: redis.Redis, queue: str, *job_ids: str) -> None:
    """Wait until every given id's lease (its active score) is at or before server now."""
    active = Keys(queue).active

    def lapsed() -> bool:
        now = server_ms(client)
        scores = [client.zscore(active, job_id) for job_id in job_ids]
        assert all(s is not None for s in scores), "a job left active while waiting"
        return all(s is not None and s <= now for s in scores)

    wait_until(lapsed)
    # ZRANGEBYSCORE takes scores <= now: one more millisecond makes every reader agree
    time.sleep(0.002)
