"""Rate limits: how many jobs of a queue, or of one group, may start per window.

Enforced by the claim transition on the server's clock (``claim-3.lua`` with
``_lib_rate.lua``): over ANY window of ``per_ms`` no more than ``max_jobs`` jobs start,
whatever the number of workers, so no worker counts anything. A queue's limit holds
back every claim of it; a group's holds back only its lane (the group leaves the ring
until its window opens; other groups and ungrouped jobs flow on). Each limit keeps a
log of the starts of its last window: at most ``max_jobs`` entries, expiring ``per_ms``
after the last one, so memory stays bounded by the limits set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from echomq.errors import MAX_RATE_WINDOW_MS, InvalidArgument
from echomq.queue.connection import Connection
from echomq.queue.keys import check_name
from echomq.queue.transitions import rates

MAX_RATE_JOBS = 100_000
"""The largest ``max_jobs``: a window's log holds one entry per start (``_lib_rate.lua``'s
``emq_rate.MAX_JOBS``)."""


@dataclass(frozen=True)
class RateLimit:
    """One limit: ``group`` None for the whole queue."""

    group: str | None
    max_jobs: int
    per_ms: int


def _check(max_jobs: object, per_ms: object) -> tuple[int, int]:
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or not (
            0 < max_jobs <= MAX_RATE_JOBS):
        raise InvalidArgument(f"max_jobs must be an int from 1 to {MAX_RATE_JOBS}, "
                              f"got {max_jobs!r}")
    if isinstance(per_ms, bool) or not isinstance(per_ms, int) or not (
            0 < per_ms <= MAX_RATE_WINDOW_MS):
        raise InvalidArgument(f"per_ms must be an int of milliseconds from 1 to "
                              f"{MAX_RATE_WINDOW_MS} (a day), got {per_ms!r}")
    return max_jobs, per_ms


def _group(group: object) -> str | None:
    return None if group is None else check_name(group, "group")


def set_rate_limit(conn: Connection, queue: str, max_jobs: int, per_ms: int, *,
                   group: str | None = None) -> None:
    """Let at most ``max_jobs`` jobs of ``queue`` (of its ``group`` only, when given)
    start in any window of ``per_ms``. Replaces that limit if one was set; takes effect
    at the next claim, and idle Consumers are woken to claim under it. Refuses (before
    the wire, ``InvalidArgument``/``InvalidKey``) a count outside 1..100,000, a window
    outside 1 ms..1 day and a bad group name."""
    limit = _check(max_jobs, per_ms)
    keys = conn.keys(queue)
    conn.executor.run(*rates.rate_limit_call(keys, _group(group), limit))


def clear_rate_limit(conn: Connection, queue: str, *, group: str | None = None) -> bool:
    """Remove the limit of ``queue`` (of its ``group``, when given); False when there was
    none. Consumers sleeping on its window are woken."""
    keys = conn.keys(queue)
    return rates.rate_limit_changed(
        conn.executor.run(*rates.rate_limit_call(keys, _group(group), None)))


def rate_limits(conn: Connection, queue: str) -> list[RateLimit]:
    """Every limit of ``queue``: the queue's own first (if set), then its groups' by name."""
    raw = cast(dict[str, str], conn.redis.hgetall(conn.keys(queue).rate))
    found: list[RateLimit] = []
    for field, value in raw.items():
        if field != "queue" and not field.startswith("g:"):
            continue  # the queue's wait a handler asked for (`until`)
        max_jobs, _, per_ms = value.partition(":")
        group = None if field == "queue" else field[2:]
        found.append(RateLimit(group, int(max_jobs), int(per_ms)))
    return sorted(found, key=lambda limit: (limit.group is not None, limit.group or ""))
