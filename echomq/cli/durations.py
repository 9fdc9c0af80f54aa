"""Durations on the command line: ``500ms``, ``30s``, ``15m``, ``12h``, ``7d``, ``2w``.

One parser and one option type, so every command that takes a duration reads it the
same way. A bare number is refused, since "30" could mean seconds or milliseconds;
only an option that documents it (``--timeout``: seconds, as before units) reads one.
"""

from __future__ import annotations

import re
from typing import Any

import click

UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
            "w": 604_800_000}
UNIT_NAMES = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours",
              "d": "days", "w": "weeks"}
_NUMBER = r"([0-9]{1,12}(?:\.[0-9]{1,6})?)"
"""ASCII digits only (``int`` would read a non-ASCII digit), with bounded length."""
_DURATION = re.compile(rf"^\s*{_NUMBER}\s*(ms|s|m|h|d|w)\s*$")
_BARE = re.compile(rf"^\s*{_NUMBER}\s*$")


def parse_duration_ms(text: str, bare_unit: str | None = None) -> int:
    """``text`` (a number and a unit; a bare number in ``bare_unit`` when given) in
    milliseconds, rounded to the nearest; ValueError when it is not one."""
    found = _DURATION.match(text)
    if found is None and bare_unit is not None:
        bare = _BARE.match(text)
        if bare is not None:
            return round(float(bare[1]) * UNITS_MS[bare_unit])
    if found is None:
        bare_note = f"; a bare number is in {UNIT_NAMES[bare_unit]}" if bare_unit else ""
        raise ValueError(f"{text!r} is not a duration such as 30s, 15m, 12h, 7d or 400d "
                         f"(units: ms, s, m, h, d, w{bare_note})")
    return round(float(found[1]) * UNITS_MS[found[2]])


def format_duration_ms(ms: int) -> str:
    """``ms`` in the largest unit up to days that divides it (the parser reads it back)."""
    for unit, size in sorted(UNITS_MS.items(), key=lambda kv: -kv[1]):
        if unit == "w":
            continue
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


class Duration(click.ParamType[int, Any]):
    """A click option type: a duration, answered in milliseconds.

    ``minimum`` (ms) refuses a shorter one (an interval or a timeout must be at least
    1 ms); ``bare_unit`` is the unit of a bare number, for an option that documented one
    before it took units (None: a bare number is refused)."""

    name = "duration"

    def __init__(self, minimum: int = 0, bare_unit: str | None = None) -> None:
        self.minimum = minimum
        self.bare_unit = bare_unit

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            ms = value
        else:
            try:
                ms = parse_duration_ms(str(value), self.bare_unit)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        if ms < self.minimum:
            self.fail(f"{value!r} is shorter than {format_duration_ms(self.minimum)}",
                      param, ctx)
        return ms


DURATION = Duration()
POSITIVE_DURATION = Duration(minimum=1)
"""An interval, a lease or a timeout: at least 1 ms."""
