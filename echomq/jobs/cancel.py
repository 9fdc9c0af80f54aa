"""Cooperative cancel: a token the handler checks, and ``request`` to cancel by id.

A token touches no key and no script. ``cancel`` marks it; the handler sees it at
its next ``check`` and stops at a point of its choosing. A handler that never
checks completes normally: a cancel is a message, not a kill.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from echomq.errors import CancelledError
from echomq.queue.connection import Connection

if TYPE_CHECKING:
    from echomq.queue.transitions.steering import CancelOutcome

_ids = itertools.count(1)
_cancel_lock = threading.Lock()  # so the first reason wins when two threads cancel at once


class CancelToken:
    """One cancellation's identity. Safe to cancel from one thread and check from another:
    the reason is written before the flag, and each is one atomic attribute store."""

    __slots__ = ("_cancelled", "_reason", "id")

    def __init__(self) -> None:
        self.id = next(_ids)
        self._cancelled = False
        self._reason: str | None = None

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "live"
        return f"<CancelToken {self.id} {state}>"


@dataclass(frozen=True)
class Cancelled:
    """``check`` found this token cancelled, for ``reason``."""

    reason: str | None


def new() -> CancelToken:
    """Mint a token that names one cancellation."""
    return CancelToken()


def cancel(token: CancelToken, reason: str | None = None) -> None:
    """Mark ``token`` cancelled. The first reason wins; later calls change nothing."""
    with _cancel_lock:
        if token._cancelled:
            return
        token._reason = reason  # written before the flag, so a checker sees both
        token._cancelled = True


def check(token: CancelToken) -> Cancelled | None:
    """``None``, or ``Cancelled(reason)`` if this token was cancelled. O(1), never blocks."""
    if token._cancelled:
        return Cancelled(token._reason)
    return None


def check_or_raise(token: CancelToken) -> None:
    """Raise ``CancelledError`` if this token was cancelled; else return at once."""
    found = check(token)
    if found is not None:
        raise CancelledError(found.reason)


def request(
    conn: Connection, queue: str, job_id: str, reason: str | None = None
) -> CancelOutcome:
    """Cancel a job by queue and id from anywhere.

    One ``cancel`` transition reads the job's state and acts on it atomically: pending
    or scheduled -> removed (``"removed"``); active -> a ``cancel`` event on the queue's
    events channel (``"signalled"``), so a job claimed a moment ago is signalled, never
    refused. The event is at most once: with no live subscriber (no Consumer started
    with ``cancel=True``) nobody hears it and the job runs on. Any other state raises
    ``NotCancellable``; no row raises ``JobGone``.
    """
    # the operator's steering calls (and the events they publish) load here, on a cancel by
    # id: every worker loads the tokens above, and a plain worker's start never needed them
    from echomq.queue.transitions import steering

    call = steering.cancel_call(conn.keys(queue), job_id, reason)
    return steering.cancelled(conn.executor.run(*call), job_id)
