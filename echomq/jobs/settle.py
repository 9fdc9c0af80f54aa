"""The verbs that settle a held job (complete, fail, release) and ``remove_job`` for
an unheld one, each one transition of :mod:`echomq.queue.transitions`.

Every verb that takes a token checks, in the seed's order, the row (``JobGone``),
the token (``StaleToken``) and membership in active (``NotActive``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from echomq.errors import EchoMQError
from echomq.jobs.texts import (
    attempt_error,
    cancelled_result,
    error_entry,
    error_text,
    result_text,
)
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.transitions import settles
from echomq.queue.transitions.settles import FailVerdict, Settlement

DEFAULT_BACKOFF_MS = 1_000
DEFAULT_BACKOFF_CAP_MS = 3_600_000
KEEP_ALL = -1

__all__ = [
    "DEFAULT_BACKOFF_CAP_MS", "DEFAULT_BACKOFF_MS", "KEEP_ALL", "Settlement", "complete",
    "complete_cancelled", "complete_many", "fail", "release_many", "remove_job",
]


def complete_many(
    conn: Connection,
    queue: str,
    settlements: Sequence[Settlement],
    *,
    record: bool = False,
    keep: int = KEEP_ALL,
) -> list[EchoMQError | None]:
    """Settle many held jobs in one round trip; per job, None or the error it met.

    ``record`` appends every settled outcome to the queue's outcome stream in the
    same script (a declared stream is appended to either way). ``keep`` bounds how
    many completed rows are retained (-1: all).
    """
    if not settlements:
        return []
    call = settles.complete_call(conn.keys(queue), settlements, record, keep)
    reply = conn.executor.run(*call)
    return settles.completed([s.job_id for s in settlements], reply)


def complete(
    conn: Connection,
    queue: str,
    job_id: str,
    token: int,
    result: Any = None,
    *,
    record: bool = False,
    keep: int = KEEP_ALL,
) -> None:
    """Settle a held job as completed with ``result`` (any JSON value)."""
    settlement = Settlement(job_id, token, "completed", result_text(result))
    (error,) = complete_many(conn, queue, [settlement], record=record, keep=keep)
    if error is not None:
        raise error


def complete_cancelled(
    conn: Connection, queue: str, job_id: str, token: int, reason: str | None = None,
    *, record: bool = False,
) -> None:
    """Settle a held job as cancelled: a completion with result ``cancelled:<reason>``."""
    settlement = Settlement(job_id, token, "cancelled", cancelled_result(reason))
    (error,) = complete_many(conn, queue, [settlement], record=record)
    if error is not None:
        raise error


def fail(
    conn: Connection,
    queue: str,
    job_id: str,
    token: int,
    error: BaseException | str,
    *,
    backoff_ms: int = DEFAULT_BACKOFF_MS,
    backoff_cap_ms: int = DEFAULT_BACKOFF_CAP_MS,
    record: bool = False,
    retry: bool = True,
    delay_ms: int | None = None,
) -> FailVerdict:
    """A held job failed: ``"retrying"`` (scheduled after an exponential backoff
    while tries remain) or ``"dead"`` (dead-lettered with ``last_error``).

    ``retry=False`` dead-letters at once: for a failure that would repeat on
    every try (a result that cannot be stored, an input the handler rejects).
    ``delay_ms`` schedules the retry that long from now instead of the backoff. Each
    call appends the attempt's error (an exception's type, message and traceback; a
    string as the message) to the row's ``errors``, the last 10 kept.
    """
    validate.positive_int(backoff_ms, "backoff_ms")
    validate.positive_int(backoff_cap_ms, "backoff_cap_ms")
    entry = error_entry("", error) if isinstance(error, str) else attempt_error(error)
    call = settles.fail_call(conn.keys(queue), job_id, token, error_text(error),
                                 backoff_ms=backoff_ms, backoff_cap_ms=backoff_cap_ms,
                                 record=record, retry=retry, delay_ms=delay_ms,
                                 error_entry=entry)
    verdict = settles.failed(conn.executor.run(*call), job_id)
    if isinstance(verdict, BaseException):
        raise verdict
    return verdict


def release_many(
    conn: Connection, queue: str, held: Sequence[tuple[str, int]]
) -> list[EchoMQError | None]:
    """Hand held jobs back to the front of pending at once (graceful shutdown)."""
    if not held:
        return []
    reply = conn.executor.run(*settles.release_call(conn.keys(queue), held))
    return settles.released(held, reply)


def remove_job(conn: Connection, queue: str, job_id: str) -> None:
    """Delete a job no worker holds: pending, scheduled, completed or dead (its row and
    its set entry). An active job raises ``NotRemovable`` (it settles first); no row
    raises ``JobGone``. A recorded outcome stays in the stream and the archive."""
    keys = conn.keys(queue)
    reply = conn.executor.run(*settles.remove_call(keys, job_id))
    settles.removed(reply, job_id)
