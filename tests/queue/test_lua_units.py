"""An EVALSHA script carries the shared helpers its body needs and no others
(``echomq.queue.lua_units``): every helper its code names is defined in it, above its
use; the helper files split into units without losing a line; every script a server
compiles; and a one-job call no longer defines every helper first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

import echomq
from echomq.queue import lua_units, registry

LUA_DIRS = [Path(echomq.__file__).parent / part / "lua" for part in ("queue", "archive")]
HELPER_FILES = sorted(p for d in LUA_DIRS for p in d.glob("_lib*.lua"))
ALL = {**registry.transitions(), **registry.scripts(registry.ARCHIVE_PACKAGE)}
DEFINED = {u.name for t in ALL.values() for u in t.lib}


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", "\n".join(lua_units.code_lines(text))))


@pytest.mark.parametrize("path", HELPER_FILES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_a_helper_file_splits_into_units_without_losing_a_line_of_code(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    units = lua_units.split(source)
    assert units and len({u.name for u in units}) > 0
    assert lua_units.code_lines("".join(u.text for u in units)) == lua_units.code_lines(source)


@pytest.mark.parametrize("name", sorted(ALL))
def test_a_script_defines_every_helper_its_code_names_above_its_use(name: str) -> None:
    t = ALL[name]
    script = t.script
    missing = (words(script) & DEFINED) - {u.name for u in lua_units.split(
        script[script.index("\n") + 1:-len(t.body)])}
    assert not missing, f"{name} uses helpers it does not carry: {sorted(missing)}"
    # the carried units keep the library's order
    positions = [script.find(u.text) for u in t.lib if u.text in script]
    assert positions == sorted(positions)


def test_a_script_carries_only_what_it_needs() -> None:
    every = "".join(u.text for u in registry.named("add").lib)
    add = registry.named("add").script
    assert "emq_add_job" in add and "emq_flow" not in add and "emq_rate" not in add
    assert len(add) < len(every) / 4
    assert "emq_run_id" in registry.named("claim").script  # named in a native branch: kept


def test_every_script_compiles_on_the_server(server_url: str) -> None:
    client = redis.Redis.from_url(server_url)
    try:
        for name, t in ALL.items():
            assert client.script_load(t.script) == t.sha, name
    finally:
        client.close()
