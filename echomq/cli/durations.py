"""Durations on the command line: ``500ms``, ``30s``, ``15m``, ``12h``, ``7d``, ``2w``.

One parser, so every command that takes a duration reads it the same way; a bare
number is refused, since "30" could mean seconds or milliseconds.
"""

from __future__ import annotations

import re
from typing import Any

import click

UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
            "w": 604_800_000}
_DURATION = re.compile(r"^\s*([0-9]+)\s*(ms|s|m|h|d|w)\s*$")  # \d takes "٣" too


def parse_duration_ms(text: str) -> int:
    """``text`` (a whole number and a unit) in milliseconds; ValueError when it is not."""
    found = _DURATION.match(text)
    if found is None:
        raise ValueError(f"{text!r} is not a duration such as 30s, 15m, 12h, 7d or 400d "
                         "(units: ms, s, m, h, d, w)")
    return int(found[1]) * UNITS_MS[found[2]]


def format_duration_ms(ms: int) -> str:
    """``ms`` in the largest unit up to days that divides it (the parser reads it back)."""
    for unit, size in sorted(UNITS_MS.items(), key=lambda kv: -kv[1]):
        if unit == "w":
            continue
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


class Duration(click.ParamType[int, Any]):
    """A click option type: a duration, answered in milliseconds."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_duration_ms(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()
