"""The catalogue's steering: ``cancel`` and the operator's transitions (``pause``,
``resume``, ``promote``, ``group_limit``, ``retry_dead``), each call beside its parser."""


from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from echomq.errors import (
    EchoMQError,
    JobGone,
)
from echomq.queue import validate
from echomq.queue.events import Event, EventKind
from echomq.queue.executors import Call
from echomq.queue.keys import Keys, check_name
from echomq.queue.replies import CODES, raise_for_code

# -- cancel -------------------------------------------------------------------------

CancelOutcome = Literal["removed", "signalled"]
_CANCEL_OUTCOMES: dict[int, CancelOutcome] = {1: "removed", 2: "signalled"}
"""cancel-3.lua's success codes."""


def cancel_call(keys: Keys, job_id: str, reason: str | None) -> Call:
    """cancel-3.lua: read the job's state and act on it in the same call: remove a pending
    or scheduled job, publish the ``cancel`` event (``reason`` in it) for an active one."""
    message = Event(EventKind.CANCEL, job_id, reason).encode()
    return ("cancel", [keys.pending, keys.scheduled, keys.job(job_id)],
            [keys.base, job_id, message])


def cancelled(reply: Any, job_id: str) -> CancelOutcome:
    """cancel's reply ``{code, state}``: ``"removed"`` or ``"signalled"``; raise ``JobGone``
    (no row) or ``NotCancellable`` (naming the state it found)."""
    code, state = int(reply[0]), str(reply[1])
    outcome = _CANCEL_OUTCOMES.get(code)
    if outcome is not None:
        return outcome
    error = CODES.get(code)
    if error is None:
        raise EchoMQError(f"cancel {job_id!r}: unknown reply {code}")
    if error is JobGone:
        raise JobGone(f"cancel {job_id!r}: no such job")
    raise error(f"cancel {job_id!r}: the job is {state}")


# -- the operator's transitions: pause, resume, promote, group_limit, retry_dead ----


def pause_call(keys: Keys) -> Call:
    """pause-1.lua: set the queue's ``paused`` flag; claim hands out nothing while set."""
    return ("pause", [keys.meta], [keys.base])


def resume_call(keys: Keys) -> Call:
    """resume-1.lua: clear the ``paused`` flag and wake idle Consumers."""
    return ("resume", [keys.meta], [keys.base])


def toggled(reply: Any) -> bool:
    """pause's or resume's reply: True when the flag changed, False when it already was."""
    return int(reply) == 1


def promote_call(keys: Keys, job_id: str) -> Call:
    """promote-3.lua: a scheduled job becomes pending now."""
    return ("promote", [keys.scheduled, keys.pending, keys.job(job_id)], [keys.base, job_id])


def promoted(reply: Any, job_id: str) -> None:
    """promote's reply: return when promoted; raise ``JobGone`` or ``NotScheduled``."""
    raise_for_code(int(reply), job_id, "promote")


def group_limit_call(keys: Keys, group: str, limit: int) -> Call:
    """group_limit-1.lua: how many jobs of ``group`` may be active at once; the ring
    follows the new limit in the same call. Its reply is always 1."""
    return ("group_limit", [keys.glimits],
            [keys.base, check_name(group, "group"), validate.positive_int(limit, "limit")])


RETRY_BATCH = 1000
"""The most dead jobs one retry_dead call moves (the Python verb loops)."""


def retry_dead_call(keys: Keys, job_ids: Sequence[str] | None, count: int) -> Call:
    """retry_dead-1.lua: the given dead ids (at most ``RETRY_BATCH``), or with
    ``job_ids=None`` the ``count`` oldest of the dead set, back to pending."""
    if job_ids is None:
        return ("retry_dead", [keys.dead], [keys.base, "oldest", count])
    for job_id in job_ids:
        keys.job(job_id)  # the gate, before the wire
    return ("retry_dead", [keys.dead], [keys.base, "ids", len(job_ids), *job_ids])


def retried(reply: Any) -> tuple[int, int]:
    """retry_dead's reply: (how many moved to pending, how many ids the call looked at)."""
    moved, scanned = reply
    return int(moved), int(scanned)
