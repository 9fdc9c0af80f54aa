"""How a value reads in ``emq``'s human output: structured values as JSON (never a Python
repr), times as ISO 8601 UTC (never raw epoch milliseconds), nothing (None) as ``-``.

``--json`` output keeps the numbers (``emit(..., True)``); only the human form goes
through here, so a script and a person each read what suits them.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

_STREAM_ID = re.compile(r"^([0-9]{1,15})-[0-9]+$")
_TIME_KEYS = ("at", "next_fire", "last_fire")
"""Keys (besides ``*_at``) whose integer value is epoch milliseconds."""
_STREAM_ID_KEYS = ("checkpoint", "head", "trimmed_through", "pruned_through", "through")
"""Keys whose value is a stream id (``<ms>-<seq>``): shown with the time it stands for."""
MAX_MS = 253_402_300_799_999
"""The last millisecond of year 9999: above it, a number is not shown as a time."""


def iso_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 UTC (``2026-12-01T20:23:24.340Z``); None stays None."""
    if ms is None:
        return None
    if not 0 <= ms <= MAX_MS:
        return str(ms)
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def is_time_key(key: str) -> bool:
    """Whether ``key`` names an epoch-ms time in EchoMQ's dicts (``at``, ``*_at``)."""
    return key in _TIME_KEYS or key.endswith("_at")


def human(value: Any, key: str = "") -> str:
    """``value`` (of field ``key``) as one person reads it; see the module docstring."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) and is_time_key(key):
        return iso_ms(value) or "-"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value % 1 else str(int(value))
    if isinstance(value, str):
        found = _STREAM_ID.match(value) if key in _STREAM_ID_KEYS else None
        if found and value != "0-0" and int(found[1]) <= MAX_MS:
            return f"{value} ({iso_ms(int(found[1]))})"
        return value
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def human_row(row: dict[str, Any]) -> dict[str, str]:
    """Every field of ``row`` through :func:`human`."""
    return {key: human(value, key) for key, value in row.items()}


def debug_lines(errors: list[dict[str, Any]], logs: list[dict[str, Any]],
                tracebacks: bool = False) -> list[str]:
    """A job's failed attempts' errors and its log lines as a person reads them, oldest
    first, one line each (time, attempt, then ``type: message`` or the text); with
    ``tracebacks``, each error's traceback follows it, indented. Nothing when neither."""
    out: list[str] = []
    if errors:
        out.append(f"errors ({len(errors)}, oldest first):")
        for e in errors:
            kind, message = str(e.get("type") or ""), str(e.get("message") or "")
            said = f"{kind}: {message}" if kind else message
            out.append(f"  {_stamp(e)}  attempt {e.get('attempt', '-')}  {said}")
            trace = str(e.get("traceback") or "")
            if tracebacks and trace:
                out.extend("    " + line for line in trace.rstrip("\n").splitlines())
    if logs:
        out.append(f"log ({len(logs)} lines, oldest first):")
        for line in logs:
            out.append(f"  {_stamp(line)}  attempt {line.get('attempt', '-')}  "
                       f"{line.get('text', '')}")
    return out


def _stamp(item: dict[str, Any]) -> str:
    """An error's or a log line's ``at`` as ISO 8601 UTC (``-`` when it has none)."""
    at = item.get("at")
    return (iso_ms(at) or "-") if isinstance(at, int) else "-"


def time_option(value: str | None) -> int | None:
    """A time typed as an option (``--since``, ``--until``): ms since the epoch or ISO
    8601 (naive means UTC), as ms; a BadParameter (one line) for anything else,
    including a number no clock reaches."""
    import click

    from echomq.archive.entries import parse_time
    from echomq.errors import InvalidArgument

    try:
        ms = parse_time(value)
    except InvalidArgument as exc:
        raise click.BadParameter(str(exc)) from exc
    except (ValueError, OverflowError) as exc:  # a date past year 9999, a huge offset
        raise click.BadParameter(f"{value!r}: {exc}") from exc
    if ms is not None and not 0 <= ms <= MAX_MS:
        raise click.BadParameter(f"{value!r} is not a time between 1970 and 9999")
    return ms
