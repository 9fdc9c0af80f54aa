"""The count-thresholded stalled sweep (the seed's ``EchoMQ.Stalled.check``).

Below ``max_stalled`` a lapsed job is recovered; at or above it, dead-lettered with
``last_error = "stalled"``. At the default of 1 the first counted stall
dead-letters: reap is the recover-once path, this is the give-up path.
"""

from __future__ import annotations

import logging
import threading

from echomq.errors import LaneNotNative
from echomq.models import StalledSweep
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.transitions import leases

DEFAULT_MAX_STALLED = 1
DEFAULT_LIMIT = 100
DEFAULT_INTERVAL_MS = 30_000

log = logging.getLogger("echomq.stalled")
_warned: set[str] = set()
_warned_lock = threading.Lock()


def stalled_check(
    conn: Connection, queue: str, max_stalled: int = DEFAULT_MAX_STALLED,
    limit: int = DEFAULT_LIMIT,
) -> StalledSweep:
    """Run ONE sweep over at most ``limit`` lapsed leases."""
    validate.positive_int(max_stalled, "max_stalled")
    validate.positive_int(limit, "limit")
    call = leases.stalled_call(conn.keys(queue), max_stalled, limit)
    return leases.swept(conn.executor.run(*call))


def sweep_stalled(
    conn: Connection, queue: str, max_stalled: int = DEFAULT_MAX_STALLED,
    limit: int = DEFAULT_LIMIT,
) -> StalledSweep:
    """One host sweep pass: what the Consumer's beat, ``BatchScheduler`` and ``emq sweep`` run.

    On the functions executor the native twin refuses the whole pass when a lapsed row
    is grouped (``LaneNotNative``: the seed's refusal, kept by ``stalled_check``). The
    host then runs the scripted sweep on the same client for that pass, which returns
    grouped rows to their lanes and recovers the ungrouped ones beside them, so one
    grouped job never wedges recovery. That pass counts every lapse as a stall (the
    script has no restart exemption). Said once per process and queue, at WARNING.
    """
    try:
        return stalled_check(conn, queue, max_stalled, limit)
    except LaneNotNative:
        _warn_once(queue)
        return stalled_check(conn.with_executor("scripts"), queue, max_stalled, limit)


def _warn_once(queue: str) -> None:
    with _warned_lock:
        if queue in _warned:
            return
        _warned.add(queue)
    log.warning(
        "stalled sweep of %r: a lapsed grouped job is not native to the functions "
        "executor; passes that meet one run the scripted sweep instead (said once)", queue,
    )
