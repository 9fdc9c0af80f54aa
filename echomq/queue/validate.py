"""Argument gates that run before the wire (the key builder gates names).

Every duration (ms: leases, delays, backoffs, intervals) and every count (limits,
thresholds, attempts, keeps) a verb takes is an int from 1 (or 0 where zero means
"none") up to ONE bound, :data:`MAX_INT`. The functions library checks the same
bound natively (``_lib.lua``'s ``EMQ_MAX_INT``), so a direct FCALL with a huge
value is refused as the Python gate refuses it, and both executors agree.
"""

from __future__ import annotations

import json
import re
from typing import Any

from echomq.errors import InvalidArgument

MAX_PRIORITY = 1023

MAX_INT = 2**41
"""The largest duration (ms) or count any verb accepts: 2,199,023,255,552 ms, about
69.7 years. A lease or delay this long added to the server clock stays an exact
integer in a Lua/IEEE double (< 2**53) for millennia, so a score never rounds, never
becomes 1e30 and a deadline never turns negative; in seconds it stays below
``threading.TIMEOUT_MAX``, so a host-side wait on it never overflows; no count a server
holds comes near it. Keep in step with ``EMQ_MAX_INT`` in ``lua/_lib.lua``."""

MAX_PAYLOAD_DEPTH = 256
"""The deepest nesting of lists and objects a payload may have. Far beyond real data,
and far enough below Python's recursion limit that a payload accepted here decodes
in any worker thread; deeper is refused with ``InvalidArgument`` like any bad payload."""

_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
"""``json.dumps(payload, separators=(",", ":"), allow_nan=False)`` without building an
encoder per call (``dumps`` makes one whenever an argument is not its default). Its
output is ASCII (``ensure_ascii``), so its length is its size in bytes."""

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def ascii_digits(text: str) -> bool:
    """True when ``text`` is one or more ASCII digits. ``str.isdigit`` also takes ``²``
    (then ``int`` raises) and ``٣`` (which ``int`` reads as 3): a port, a db or a time
    typed by a user must be the digits it looks like."""
    return text.isascii() and text.isdigit()


def _bounded(number: int, what: str) -> int:
    if number > MAX_INT:
        raise InvalidArgument(f"{what} must be at most {MAX_INT}, got {number}")
    return number


def positive_int(value: object, what: str) -> int:
    """``value`` if it is an int in 1..``MAX_INT`` (bools refused), else ``InvalidArgument``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgument(f"{what} must be a positive integer, got {value!r}")
    return _bounded(value, what)


def non_negative_int(value: object, what: str) -> int:
    """``value`` if it is an int in 0..``MAX_INT`` (bools refused), else ``InvalidArgument``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"{what} must be a non-negative integer, got {value!r}")
    return _bounded(value, what)


def positive_seconds(value: object, what: str) -> float:
    """``value`` if it is a finite number of seconds in (0, ``MAX_INT`` / 1000] (bools
    refused), else ``InvalidArgument``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
        0 < value <= MAX_INT / 1000
    ):
        raise InvalidArgument(
            f"{what} must be a number of seconds in (0, {MAX_INT // 1000}], got {value!r}")
    return float(value)


MAX_EPOCH_MS = MAX_INT * 1000
"""The latest instant (epoch ms) a verb accepts: far past any clock (year ~71,600), still
exact in a double. ``EMQ_MAX_INT * 1000`` in ``lua/_lib.lua``."""


def epoch_ms(value: object, what: str) -> int:
    """``value`` if it is an instant in epoch ms, 1..``MAX_EPOCH_MS``, else ``InvalidArgument``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_EPOCH_MS:
        raise InvalidArgument(f"{what} must be epoch milliseconds in 1..{MAX_EPOCH_MS}, "
                              f"got {value!r}")
    return value


def keep_count(value: object, what: str) -> int:
    """A retention count: -1 (keep all) or an int in 0..``MAX_INT``, else ``InvalidArgument``."""
    if value == -1 and isinstance(value, int) and not isinstance(value, bool):
        return -1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"{what} must be -1 (keep all) or a count >= 0, got {value!r}")
    return _bounded(value, what)


def priority(value: object) -> int:
    number = non_negative_int(value, "priority")
    if number > MAX_PRIORITY:
        raise InvalidArgument(f"priority must be at most {MAX_PRIORITY}, got {number}")
    return number


def payload_json(payload: Any, limit: int) -> str:
    """The payload as compact JSON, refused if it is not JSON, is nested deeper than
    ``MAX_PAYLOAD_DEPTH`` or is over ``limit`` bytes."""
    try:
        text = _encode(payload)
    except RecursionError as exc:
        raise InvalidArgument(
            f"payload is nested too deep (at most {MAX_PAYLOAD_DEPTH} levels)"
        ) from exc
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"payload is not JSON-serialisable: {exc}") from exc
    size = len(text)  # ensure_ascii: one byte a character
    if size > limit:
        raise InvalidArgument(f"payload is {size} bytes; the limit is {limit}")
    # fewer brackets than the limit cannot nest past it: most payloads stop here, at C speed
    if text.count("[") + text.count("{") > MAX_PAYLOAD_DEPTH:
        depth = json_depth(text)
        if depth > MAX_PAYLOAD_DEPTH:
            raise InvalidArgument(
                f"payload is nested {depth} levels deep; the limit is {MAX_PAYLOAD_DEPTH}"
            )
    return text


def json_depth(text: str) -> int:
    """How deep lists and objects nest in JSON ``text`` (brackets inside strings do not
    count: the strings are cut out first)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest
