"""The catalogue's settles: ``complete``, ``fail``, ``release`` and ``remove_job``, the
ways a held (or idle) job leaves ``active``, each call beside its reply's parser."""


from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import chain
from typing import Any, Literal, NamedTuple

from echomq.errors import (
    EchoMQError,
    InvalidArgument,
)
from echomq.queue import validate
from echomq.queue.executors import Call
from echomq.queue.keys import Keys, names_ok
from echomq.queue.replies import CODES, raise_for_code

Settled = Literal["completed", "cancelled"]
"""How ``complete`` settles a job: a cancelled job is a completion too."""

FailVerdict = Literal["retrying", "dead"]
_FAIL_VERDICTS: dict[int, FailVerdict] = {1: "retrying", 2: "dead"}
"""fail-3.lua's success codes."""


class Settlement(NamedTuple):
    """One job to settle in a batch: its id, token, how it settles and its result text.

    Immutable like the frozen dataclass it was, and built for every job a Consumer
    settles: a tuple costs ~0.35 us to make, a frozen dataclass ~1.3 us."""

    job_id: str
    token: int
    outcome: Settled
    result: str


def per_job_errors(verb: str, job_ids: Sequence[str], codes: Sequence[Any]
                   ) -> list[EchoMQError | None]:
    """A batch transition's codes as None (done) or the error each job met."""
    if (len(codes) == len(job_ids) and CODES.keys().isdisjoint(codes)
            and set(map(type, codes)) <= {int}):  # every job done: no loop (~200 a job)
        return [None] * len(codes)
    out: list[EchoMQError | None] = []
    for job_id, code in zip(job_ids, codes, strict=True):
        error = CODES.get(int(code))
        out.append(error(f"{verb} {job_id!r}: {error.__name__}") if error else None)
    return out

# -- complete -----------------------------------------------------------------------


def complete_call(keys: Keys, settlements: Sequence[tuple[str, int, Settled, str]],
                  record: bool, keep: int = -1) -> Call:
    """complete-2.lua for a batch of ``Settlement``s (or plain tuples in their order); its
    reply is one code per job (``per_job_errors``)."""
    args: list[str | int] = [keys.base, "1" if record else "0",
                             validate.keep_count(keep, "keep")]
    if not names_ok([s[0] for s in settlements]):  # the gate, before the wire, all at once
        for s in settlements:
            keys.job(s[0])  # raises for the first id that fails
    args.extend(chain.from_iterable(settlements))  # the Settlement's fields, in its order
    return ("complete", [keys.active, keys.completed], args)


def completed(job_ids: Sequence[str], reply: Any) -> list[EchoMQError | None]:
    """complete's reply, per job in the call's order: None (settled) or the error it met."""
    return per_job_errors("complete", job_ids, reply)


# -- fail ---------------------------------------------------------------------------


def fail_call(
    keys: Keys, job_id: str, token: int, error: str, *, backoff_ms: int, backoff_cap_ms: int,
    record: bool = False, retry: bool = True, delay_ms: int | None = None,
    jitter: float | None = None, error_entry: str | None = None,
) -> Call:
    """fail-3.lua for one job: retry after a backoff, or dead-letter (``retry=False``: at once).

    ``delay_ms`` schedules the retry that long from now instead of the backoff; ``jitter``
    (r in [0, 1], drawn here on the host) makes the backoff ``floor(backoff * r)``, full
    jitter; ``error_entry`` (a JSON object, see ``texts.attempt_error``) is appended to the
    row's ``errors`` with the server's time and the attempt.
    """
    keys.job(job_id)  # the gate, before the wire
    delay = "" if delay_ms is None else validate.non_negative_int(delay_ms, "delay_ms")
    if jitter is None:
        spread = ""
    elif (isinstance(jitter, bool) or not isinstance(jitter, int | float)
          or not 0 <= jitter <= 1):
        raise InvalidArgument(f"jitter must be a number in [0, 1], got {jitter!r}")
    else:
        spread = repr(float(jitter))
    entry = "" if error_entry is None else _error_entry(error_entry)
    return ("fail", [keys.active, keys.scheduled, keys.dead],
            [keys.base, job_id, token, error, backoff_ms, backoff_cap_ms,
             "1" if record else "0", "0" if retry else "1", delay, spread, entry])


def _error_entry(text: str) -> str:
    """An attempt's error entry, checked to be a JSON object before the wire."""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise InvalidArgument("error_entry must be the text of a JSON object")
    return text


def failed(reply: Any, job_id: str) -> FailVerdict | BaseException:
    """fail's reply: the verdict, or the error the job met (never raises)."""
    if isinstance(reply, BaseException):
        return reply
    code = int(reply)
    verdict = _FAIL_VERDICTS.get(code)
    if verdict is not None:
        return verdict
    error = CODES.get(code)
    if error is None:
        return EchoMQError(f"fail {job_id!r}: unknown reply {code}")
    return error(f"fail {job_id!r}: {error.__name__}")

def release_call(keys: Keys, held: Sequence[tuple[str, int]]) -> Call:
    """release-1.lua: hand ``(id, token)`` pairs back to the front of pending; one code per job."""
    args: list[str | int] = [keys.base]
    for job_id, token in held:
        keys.job(job_id)  # the gate, before the wire
        args += [job_id, token]
    return ("release", [keys.active], args)


def released(held: Sequence[tuple[str, int]], reply: Any) -> list[EchoMQError | None]:
    """release's reply, per job: None (handed back) or the error it met."""
    return per_job_errors("release", [job_id for job_id, _ in held], reply)


def remove_call(keys: Keys, job_id: str) -> Call:
    """remove_job-5.lua: delete a job no worker holds (pending, scheduled, completed, dead)."""
    return ("remove_job",
            [keys.pending, keys.scheduled, keys.completed, keys.dead, keys.job(job_id)],
            [keys.base, job_id])


def removed(reply: Any, job_id: str) -> None:
    """remove_job's reply: return when removed; raise ``NotRemovable`` or ``JobGone``."""
    raise_for_code(int(reply), job_id, "remove_job")
