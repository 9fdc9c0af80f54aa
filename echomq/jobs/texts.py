"""What a job keeps as text: a handler's result, a cancel's reason, a failure's error.

The verbs on held jobs and the worker's handler context both format through here,
so a result stored by ``complete`` and one stored by a Consumer read the same.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from typing import Any

from echomq.errors import InvalidArgument
from echomq.models import CANCELLED_PREFIX

DEFAULT_RESULT_LIMIT = 512 * 1024
"""Bytes of result JSON a completion may store (``Consumer(result_limit=)``)."""

PROGRESS_LIMIT = 64 * 1024
"""Bytes of JSON one ``job.progress`` call may store and publish."""


_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""The C scanner ``json.loads`` ends in (it keeps no state between calls; typeshed does
not list the attribute)."""


def decoded(text: str) -> Any:
    """``json.loads(text)``, three times cheaper for the compact text producers write
    (~1.2 us -> 0.4 us a task's payload): the C scanner alone, without the Python passes
    around it (type checks, two whitespace regexes). A text it does not take whole
    (whitespace around the value, extra data, an error, bytes) goes to ``json.loads``,
    which decides, so the value or the error is always ``json.loads``'s."""
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError, TypeError):
        return json.loads(text)
    if end != len(text):
        return json.loads(text)
    return value


def result_text(result: Any, limit: int = DEFAULT_RESULT_LIMIT, what: str = "result") -> str:
    """A handler's return value as stored: JSON of at most ``limit`` bytes.

    Anything else (not JSON, NaN or Infinity, nested too deep for the encoder,
    too large) raises ``InvalidArgument``: the same value would fail every retry.
    """
    try:
        text = json.dumps(result, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidArgument(f"{what} is not JSON-serialisable: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a user's __iter__ or a custom type may raise anything
        raise InvalidArgument(
            f"{what} could not be encoded: {type(exc).__name__}: {exc}") from exc
    size = len(text) if text.isascii() else len(text.encode())
    if size > limit:
        raise InvalidArgument(f"{what} is {size} bytes, over the {what} limit of {limit}")
    return text


def cancelled_result(reason: str | None) -> str:
    """The result a cancelled job is completed with."""
    return CANCELLED_PREFIX + (reason or "")


def error_text(error: BaseException | str) -> str:
    """What ``last_error`` keeps: the message, or a traceback's last lines."""
    if isinstance(error, str):
        return error
    message = "".join(traceback.format_exception_only(error)).strip()
    if type(error).__module__ == "echomq.errors":  # ``Fail: bad address``, as users raise it
        message = message.removeprefix("echomq.errors.")
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        message += f"\n  at {last.filename}:{last.lineno} in {last.name}"
    return message[-2000:]


ERROR_TRACEBACK_LIMIT = 8192
"""Bytes of traceback one attempt's error keeps (its last ones: the frame that raised)."""


def attempt_error(exc: BaseException, limit: int = ERROR_TRACEBACK_LIMIT) -> str:
    """One failed attempt's error as the row's ``errors`` keep it: the JSON object text
    ``{"type", "message", "traceback"}`` (the class's qualified name, ``str(exc)`` and the
    full formatted traceback's last ``limit`` bytes); fail-3.lua adds "at" and "attempt".
    A retry no longer hides the error before it: each attempt keeps its own."""
    name = type(exc).__qualname__
    try:
        message = str(exc)
    except Exception as failed:  # noqa: BLE001 - a user's __str__ may raise anything
        message = f"<str() raised {type(failed).__name__}>"
    trace = "".join(traceback.format_exception(exc))
    return error_entry(name, message, _tail(trace, limit))


def error_entry(kind: str, message: str, trace: str = "") -> str:
    """The JSON object text of an attempt's error (``attempt_error``; a plain string
    given to ``fail`` is ``error_entry("", text)``)."""
    return json.dumps({"type": _text(kind), "message": _text(message),
                       "traceback": _text(trace)}, separators=(",", ":"))


def _text(text: str) -> str:
    """``text`` fit for the wire: a lone surrogate (no UTF-8 byte) is written as its escape."""
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()


def _tail(text: str, limit: int) -> str:
    """The last ``limit`` bytes of ``text`` (cut on a character boundary)."""
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return data.decode()
    return data[-limit:].decode("utf-8", "ignore")
