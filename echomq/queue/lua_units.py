"""The shared Lua helpers an EVALSHA script carries: only those its body needs.

A script runs its whole text on every call, so a script that carried every helper of
``_lib*.lua`` (~70 of them, ~950 lines) paid for defining them all on each call: ~75,000
server instructions (callgrind: ``return 1`` after the helpers against alone), as much
as two jobs of a claim, and the most of a one-job call such as ``add``. The functions
library defines them once, at its load, and keeps them all.

The helper files are written as top-level units, each starting at column 0:
``local function name(...)``, ``local NAME = ...`` (or a bare ``local name`` that a
``do`` block below defines), or ``function table.member(...)`` for a member of a local
table; the comment lines above a unit travel with it. A unit is carried when the body, or
a unit carried, names what it defines (a table's members go with it). Their order is
kept, so every helper is still defined above the ones that use it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_STARTS = re.compile(r"(?:local\s+function\s+(\w+)|local\s+(\w+)|function\s+(\w+)\.)")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Unit:
    """One top-level definition: its text (comments above it included), the name it
    defines (or the table it adds a member to), and the words of its code lines."""

    text: str
    name: str
    words: frozenset[str]


def _block_open_after(in_block: bool, stripped: str) -> bool:
    """Whether a ``--[[ ]]`` comment is still open after a line (``stripped``)."""
    if in_block or stripped.startswith("--[["):
        return "]]" not in stripped
    return False


def code_lines(text: str) -> list[str]:
    """The lines of ``text`` that are not wholly comments (``--`` lines, ``--[[ ]]``
    blocks). A line of code keeps its trailing comment: words read there can only carry
    a helper too many, never one too few."""
    lines, in_block = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not (in_block or stripped.startswith("--")):
            lines.append(line)
        in_block = _block_open_after(in_block, stripped)
    return lines


def split(source: str) -> list[Unit]:
    """The top-level units of a helper file, in order (a text above the first unit is
    only the file's header comment: it is dropped)."""
    units: list[tuple[str, list[str]]] = []
    waiting: list[str] = []  # comment and blank lines: they go with what comes next
    in_block = False
    for line in source.splitlines(keepends=True):
        stripped = line.strip()
        comment = in_block or not stripped or stripped.startswith("--")
        in_block = _block_open_after(in_block, stripped)
        starts = None if comment or line[:1].isspace() else _STARTS.match(line)
        if comment:
            waiting.append(line)
        elif starts is not None:
            units.append((starts[1] or starts[2] or starts[3], [*waiting, line]))
            waiting = []
        elif units:
            units[-1][1].extend([*waiting, line])
            waiting = []
        else:
            raise RuntimeError(f"a helper file's code starts outside a unit: {line!r}")
    return [Unit("".join(lines), name, frozenset(_WORD.findall("\n".join(code_lines(
        "".join(lines)))))) for name, lines in units]


def carried(units: Sequence[Unit], body: str) -> str:
    """The units ``body`` needs, directly or through another unit, in their order."""
    defined = {u.name for u in units}
    wanted = set(_WORD.findall("\n".join(code_lines(body)))) & defined
    taken = [False] * len(units)
    grew = True
    while grew:
        grew = False
        for i, unit in enumerate(units):
            if not taken[i] and unit.name in wanted:
                taken[i] = grew = True
                wanted |= unit.words & defined
    return "".join(u.text for u, take in zip(units, taken, strict=True) if take)
