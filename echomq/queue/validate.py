"""Argument gates that run before the wire (the key builder gates names)."""

from __future__ import annotations

import json
from typing import Any

from echomq.errors import InvalidArgument

MAX_PRIORITY = 1023


def positive_int(value: object, what: str) -> int:
    """``value`` if it is a positive int (bools refused), else ``InvalidArgument``."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgument(f"{what} must be a positive integer, got {value!r}")
    return value


def non_negative_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"{what} must be a non-negative integer, got {value!r}")
    return value


def priority(value: object) -> int:
    number = non_negative_int(value, "priority")
    if number > MAX_PRIORITY:
        raise InvalidArgument(f"priority must be at most {MAX_PRIORITY}, got {number}")
    return number


def payload_json(payload: Any, limit: int) -> str:
    """The payload as compact JSON, refused if it is not JSON or is over ``limit`` bytes."""
    try:
        text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"payload is not JSON-serialisable: {exc}") from exc
    size = len(text.encode())
    if size > limit:
        raise InvalidArgument(f"payload is {size} bytes; the limit is {limit}")
    return text
