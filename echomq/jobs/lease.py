"""The lease: extend_lock checkpoints it, reap collects lapsed ones.

The lease is the active set's score (ms, server clock); there is no separate
lock to refresh.
"""

from __future__ import annotations

from echomq.errors import InvalidArgument
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.executors import Call
from echomq.queue.keys import Keys
from echomq.queue.replies import raise_for_code

REAP_BATCH = 1000


def extend_lock(conn: Connection, queue: str, job_id: str, token: int, lease_ms: int) -> None:
    """Re-score a held job's lease to server ``TIME`` + ``lease_ms``.

    Raises ``JobGone`` (no row), ``StaleToken`` (not the holder) or ``NotActive``
    (reaped or swept: a collected lease never comes back), checked in that order.
    A lapsed lease that no pass has collected yet still extends.
    """
    validate.positive_int(lease_ms, "lease_ms")
    if isinstance(token, bool) or not isinstance(token, int):
        raise InvalidArgument(f"token must be an int, got {token!r}")
    code = int(conn.executor.run(*extend_call(Keys(queue), job_id, token, lease_ms)))
    raise_for_code(code, job_id, "extend_lock")


def extend_call(keys: Keys, job_id: str, token: int, lease_ms: int) -> Call:
    """The ``extend_lock`` transition (extend_lock.lua's KEYS and ARGV)."""
    return ("extend_lock", [keys.active, keys.job(job_id)], [job_id, token, lease_ms])


def reap(conn: Connection, queue: str) -> list[str]:
    """Return every lapsed lease to pending once, with no count; the ids returned."""
    keys = Keys(queue)
    back: list[str] = []
    while True:
        batch = conn.executor.run("reap", [keys.active, keys.pending], [keys.base, REAP_BATCH])
        back.extend(batch)
        if len(batch) < REAP_BATCH:
            return back
