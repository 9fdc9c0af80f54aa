"""Settling a held job: complete, fail, release; and remove_job for unheld ones.

Every verb that takes a token checks, in the seed's order, the row (``JobGone``),
the token (``StaleToken``) and membership in active (``NotActive``).
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from echomq.errors import EchoMQError, InvalidArgument
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.executors import Call
from echomq.queue.keys import Keys
from echomq.queue.replies import CODES, raise_for_code

DEFAULT_BACKOFF_MS = 1_000
DEFAULT_BACKOFF_CAP_MS = 3_600_000
KEEP_ALL = -1
DEFAULT_RESULT_LIMIT = 512 * 1024
"""Bytes of result JSON a completion may store (``Consumer(result_limit=)``)."""

Outcome = Literal["completed", "cancelled"]


@dataclass(frozen=True)
class Settlement:
    """One job to settle in a batch: its id, token, outcome and result text."""

    job_id: str
    token: int
    outcome: Outcome
    result: str


def result_text(result: Any, limit: int = DEFAULT_RESULT_LIMIT) -> str:
    """A handler's return value as stored: JSON of at most ``limit`` bytes.

    Anything else (not JSON, NaN or Infinity, nested too deep for the encoder,
    too large) raises ``InvalidArgument``: the same value would fail every retry.
    """
    try:
        text = json.dumps(result, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidArgument(f"result is not JSON-serialisable: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a user's __iter__ or a custom type may raise anything
        raise InvalidArgument(
            f"result could not be encoded: {type(exc).__name__}: {exc}") from exc
    size = len(text) if text.isascii() else len(text.encode())
    if size > limit:
        raise InvalidArgument(f"result is {size} bytes, over the result limit of {limit}")
    return text


def cancelled_result(reason: str | None) -> str:
    return "cancelled:" + (reason or "")


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
    codes = conn.executor.run(*complete_call(Keys(queue), settlements, record, keep))
    return per_job_errors("complete", [s.job_id for s in settlements], codes)


def complete_call(
    keys: Keys, settlements: Sequence[Settlement], record: bool, keep: int = KEEP_ALL
) -> Call:
    """The ``complete`` transition for a batch (complete.lua's KEYS and ARGV)."""
    args: list[str | int] = [keys.base, "1" if record else "0",
                             validate.keep_count(keep, "keep")]
    for s in settlements:
        keys.job(s.job_id)  # the gate, before the wire
        args += [s.job_id, s.token, s.outcome, s.result]
    return ("complete", [keys.active, keys.completed], args)


def per_job_errors(verb: str, job_ids: Sequence[str], codes: Sequence[Any]
                   ) -> list[EchoMQError | None]:
    """A batch transition's codes as None (done) or the error each job met."""
    out: list[EchoMQError | None] = []
    for job_id, code in zip(job_ids, codes, strict=True):
        error = CODES.get(int(code))
        out.append(error(f"{verb} {job_id!r}: {error.__name__}") if error else None)
    return out


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


def error_text(error: BaseException | str) -> str:
    """What ``last_error`` keeps: the message, or a traceback's last lines."""
    if isinstance(error, str):
        return error
    message = "".join(traceback.format_exception_only(error)).strip()
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        message += f"\n  at {last.filename}:{last.lineno} in {last.name}"
    return message[-2000:]


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
) -> Literal["retrying", "dead"]:
    """A held job failed: ``"retrying"`` (scheduled after an exponential backoff
    while tries remain) or ``"dead"`` (dead-lettered with ``last_error``).

    ``retry=False`` dead-letters at once: for a failure that would repeat on
    every try (a result that cannot be stored, an input the handler rejects).
    """
    validate.positive_int(backoff_ms, "backoff_ms")
    validate.positive_int(backoff_cap_ms, "backoff_cap_ms")
    call = fail_call(Keys(queue), job_id, token, error_text(error), backoff_ms=backoff_ms,
                     backoff_cap_ms=backoff_cap_ms, record=record, retry=retry)
    code = int(conn.executor.run(*call))
    raise_for_code(code, job_id, "fail")
    return "retrying" if code == 1 else "dead"


def fail_call(
    keys: Keys, job_id: str, token: int, error: str, *, backoff_ms: int = DEFAULT_BACKOFF_MS,
    backoff_cap_ms: int = DEFAULT_BACKOFF_CAP_MS, record: bool = False, retry: bool = True,
) -> Call:
    """The ``fail`` transition for one job (fail.lua's KEYS and ARGV)."""
    keys.job(job_id)  # the gate, before the wire
    return ("fail", [keys.active, keys.scheduled, keys.dead],
            [keys.base, job_id, token, error, backoff_ms, backoff_cap_ms,
             "1" if record else "0", "0" if retry else "1"])


def release_many(
    conn: Connection, queue: str, held: Sequence[tuple[str, int]]
) -> list[EchoMQError | None]:
    """Hand held jobs back to the front of pending at once (graceful shutdown)."""
    if not held:
        return []
    keys = Keys(queue)
    args: list[str | int] = [keys.base]
    for job_id, token in held:
        keys.job(job_id)  # the gate, before the wire
        args += [job_id, token]
    codes = conn.executor.run("release", [keys.active], args)
    return per_job_errors("release", [job_id for job_id, _ in held], codes)


def remove_job(conn: Connection, queue: str, job_id: str) -> None:
    """Delete a pending or scheduled job (``NotRemovable`` otherwise, ``JobGone`` if none)."""
    keys = Keys(queue)
    row = keys.job(job_id)
    code = int(
        conn.executor.run("remove_job", [keys.pending, keys.scheduled, row], [keys.base, job_id])
    )
    raise_for_code(code, job_id, "remove_job")
