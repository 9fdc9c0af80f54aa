"""One reply table: every code or error a transition answers, and its exception.

Integer codes come from the ``.lua`` headers: the queue's transitions share
:data:`CODES`; a script whose codes mean something else (the archive's fold lease)
has its own row in :data:`SCRIPT_CODES`. Error replies are recognised by their
prefix here and nowhere else (redis-py hands an unknown prefix over as a bare
``ResponseError``). ``tests/queue/test_replies.py`` checks that every code any ``.lua``
file returns, the queue's and the archive's, has an entry.
"""

from __future__ import annotations

import redis

from echomq.errors import (
    EchoMQError,
    HistoryNotArchived,
    InvalidArgument,
    InvalidKey,
    JobGone,
    LaneNotNative,
    LeaseHeld,
    LeaseLost,
    NotActive,
    NotArchiveOfRecord,
    NotCancellable,
    NotDeclared,
    NotRemovable,
    NotScheduled,
    QueueBusy,
    ScheduleGone,
    StaleToken,
)

CODES: dict[int, type[EchoMQError]] = {
    -1: JobGone,
    -2: StaleToken,
    -3: NotActive,
    -4: NotRemovable,
    -5: NotScheduled,
    -6: NotCancellable,
}

SCRIPT_CODES: dict[str, dict[int, type[EchoMQError]]] = {
    "fold_acquire": {0: LeaseHeld},
    "fold_renew": {-1: LeaseLost},
    "fold_release": {},
    "fold_trim": {-1: LeaseLost, -2: NotDeclared, -3: NotArchiveOfRecord},
    "fold_mark": {-1: LeaseLost, -2: NotDeclared, -3: NotArchiveOfRecord},
    "obliterate_begin": {-1: QueueBusy, -2: HistoryNotArchived},
    "obliterate_keys": {-1: QueueBusy},
    "obliterate_end": {-1: QueueBusy},
    "cron_fire": {-1: ScheduleGone},
}
"""Every failure code of a script with codes of its own (the rest are successes)."""

_MESSAGES: dict[type[EchoMQError], str] = {
    LeaseHeld: "another archive driver holds the fold lease of {subject!r}",
    LeaseLost: "the fold lease of {subject!r} lapsed or was taken over; nothing more is "
               "trimmed or marked folded",
    NotDeclared: "the outcome stream of {subject!r} is not declared; the archive never trims it",
    NotArchiveOfRecord: "the archive of record of {subject!r} is one this driver does not "
                        "write; it folds but never trims",
    QueueBusy: "{verb} {subject!r}: the queue is no longer marked for obliteration (another "
               "obliterate ended it first)",
    ScheduleGone: "the cron schedule {subject!r} was removed or replaced before it fired",
}

ERROR_PREFIXES: dict[str, type[EchoMQError]] = {
    "EMQSTALE": StaleToken,
    "EMQSTATE": LaneNotNative,
    "EMQ.EXTEND keys": InvalidKey,
    "EMQ.STALLED.CHECK keys": InvalidKey,
    "EMQ.OBLITERATE key": InvalidKey,
    "EMQBUSY": QueueBusy,
    "EMQ.": InvalidArgument,
}


def raise_for_code(code: int, job_id: str, verb: str) -> None:
    """Raise the exception for a negative code; return quietly for a success code."""
    error = CODES.get(code)
    if error is not None:
        raise error(f"{verb} {job_id!r}: {error.__name__}")


def codes_of(transition: str) -> dict[int, type[EchoMQError]]:
    """The failure codes ``transition`` answers: its own row, else the queue's."""
    return SCRIPT_CODES.get(transition, CODES)


def raise_for_reply(transition: str, code: int, subject: str) -> int:
    """Raise the exception ``transition``'s ``code`` means; pass a success code on."""
    error = codes_of(transition).get(code)
    if error is not None:
        message = _MESSAGES.get(error, "{verb} {subject!r}: {name}")
        raise error(message.format(verb=transition, subject=subject, name=error.__name__))
    return code


def translate(exc: redis.ResponseError) -> EchoMQError | None:
    """The EchoMQ error for a script's error reply, or None if it is not ours."""
    text = str(exc)
    for prefix, error in ERROR_PREFIXES.items():
        if text.startswith(prefix) or text.startswith("ERR " + prefix):
            return error(text)
    return None
