"""The catalogue's leases: what a holder does while it holds a job (``extend_lock``,
``progress``, ``log``) and the recovery of lapsed ones (``reap``, ``stalled_check``)."""


from __future__ import annotations

from typing import Any

from echomq.errors import (
    JobGone,
    NotActive,
    StaleToken,
)
from echomq.models import StalledSweep
from echomq.queue.executors import Call
from echomq.queue.keys import Keys
from echomq.queue.replies import CODES, raise_for_code

LEASE_LOST = (StaleToken, NotActive, JobGone)
"""The errors that mean a held job's lease is no longer this holder's."""

# -- extend_lock --------------------------------------------------------------------


def extend_call(keys: Keys, job_id: str, token: int, lease_ms: int) -> Call:
    """extend_lock-2.lua: re-score a held job's lease to server TIME + ``lease_ms``."""
    return ("extend_lock", [keys.active, keys.job(job_id)], [job_id, token, lease_ms])


def extended(reply: Any, job_id: str) -> BaseException | None:
    """extend_lock's reply: None (renewed) or the error met (``LEASE_LOST`` when the
    lease is no longer the holder's); never raises."""
    if isinstance(reply, BaseException):
        return reply
    error = CODES.get(int(reply))
    return error(f"extend_lock {job_id!r}: {error.__name__}") if error else None


# -- progress -----------------------------------------------------------------------


def progress_call(keys: Keys, job_id: str, token: int, value: str, message: str) -> Call:
    """progress-2.lua: store a held job's progress (JSON text) and publish ``message`` on
    the job-events channel, fenced by the token and membership in active."""
    return ("progress", [keys.active, keys.job(job_id)],
            [job_id, token, value, keys.job_events, message])


def progressed(reply: Any, job_id: str) -> None:
    """progress's reply: return when stored; raise ``JobGone``, ``StaleToken`` or
    ``NotActive`` (``LEASE_LOST``: the holder lost the job)."""
    raise_for_code(int(reply), job_id, "progress")


# -- log ----------------------------------------------------------------------------


def log_call(keys: Keys, job_id: str, token: int, text: str) -> Call:
    """log-2.lua: append one line to a held job's ``logs``, fenced by the token and
    membership in active (the last 100 lines and 64 KiB kept)."""
    return ("log", [keys.active, keys.job(job_id)], [job_id, token, text])


def logged(reply: Any, job_id: str) -> None:
    """log's reply: return when appended; raise ``JobGone``, ``StaleToken`` or
    ``NotActive`` (``LEASE_LOST``: the holder lost the job)."""
    raise_for_code(int(reply), job_id, "log")

REAP_BATCH = 1000


def reap_call(keys: Keys, batch: int = REAP_BATCH) -> Call:
    """reap-2.lua: up to ``batch`` lapsed leases back to pending; its reply is their ids."""
    return ("reap", [keys.active, keys.pending], [keys.base, batch])

def stalled_call(keys: Keys, max_stalled: int, limit: int) -> Call:
    """stalled_check-3.lua: one count-thresholded sweep over at most ``limit`` lapses."""
    return ("stalled_check", [keys.active, keys.pending, keys.dead],
            [keys.base, max_stalled, limit])


def swept(reply: Any) -> StalledSweep:
    """stalled_check's reply: the ids recovered and the ids dead-lettered."""
    recovered, dead = reply
    return StalledSweep(recovered=list(recovered), dead=list(dead))
