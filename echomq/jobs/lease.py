"""The job's lease: extend_lock checkpoints it, reap collects lapsed ones.

The lease is the active set's score (ms, server clock); there is no separate
lock to refresh.
"""

from __future__ import annotations

from echomq.errors import InvalidArgument
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.transitions import leases
from echomq.queue.transitions.leases import REAP_BATCH

__all__ = ["REAP_BATCH", "extend_lock", "reap"]


def extend_lock(conn: Connection, queue: str, job_id: str, token: int, lease_ms: int) -> None:
    """Re-score a held job's lease to server ``TIME`` + ``lease_ms``.

    Raises ``JobGone`` (no row), ``StaleToken`` (not the holder) or ``NotActive``
    (reaped or swept: a collected lease never comes back), checked in that order.
    A lapsed lease that no pass has collected yet still extends.
    """
    validate.positive_int(lease_ms, "lease_ms")
    if isinstance(token, bool) or not isinstance(token, int):
        raise InvalidArgument(f"token must be an int, got {token!r}")
    reply = conn.executor.run(*leases.extend_call(conn.keys(queue), job_id, token, lease_ms))
    error = leases.extended(reply, job_id)
    if error is not None:
        raise error


def reap(conn: Connection, queue: str) -> list[str]:
    """Return every lapsed lease to pending once, with no count; the ids returned."""
    call = leases.reap_call(conn.keys(queue))
    back: list[str] = []
    while True:
        batch = conn.executor.run(*call)
        back.extend(batch)
        if len(batch) < REAP_BATCH:
            return back
