"""One reply table: every code or error a transition answers, and its exception.

Integer codes come from the ``.lua`` headers; error replies are recognised by
their prefix here and nowhere else (redis-py hands an unknown prefix over as a
bare ``ResponseError``). ``tests/test_replies.py`` checks that every code any
``.lua`` file returns has an entry.
"""

from __future__ import annotations

import redis

from echomq.errors import (
    EchoMQError,
    InvalidArgument,
    InvalidKey,
    JobGone,
    LaneNotNative,
    NotActive,
    NotRemovable,
    StaleToken,
)

CODES: dict[int, type[EchoMQError]] = {
    -1: JobGone,
    -2: StaleToken,
    -3: NotActive,
    -4: NotRemovable,
}

ERROR_PREFIXES: dict[str, type[EchoMQError]] = {
    "EMQSTALE": StaleToken,
    "EMQSTATE": LaneNotNative,
    "EMQ.EXTEND keys": InvalidKey,
    "EMQ.STALLED.CHECK keys": InvalidKey,
    "EMQ.": InvalidArgument,
}


def raise_for_code(code: int, job_id: str, verb: str) -> None:
    """Raise the exception for a negative code; return quietly for a success code."""
    error = CODES.get(code)
    if error is not None:
        raise error(f"{verb} {job_id!r}: {error.__name__}")


def translate(exc: redis.ResponseError) -> EchoMQError | None:
    """The EchoMQ error for a script's error reply, or None if it is not ours."""
    text = str(exc)
    for prefix, error in ERROR_PREFIXES.items():
        if text.startswith(prefix) or text.startswith("ERR " + prefix):
            return error(text)
    return None
