"""The import arrows of ARCHITECTURE.md, read from the source: every ``import`` and
``from ... import`` of every module (function-level ones included), so an arrow drawn the
wrong way fails here before a reader has to find it.

    substrate (queue, errors, models)  <-  jobs  <-  worker
    substrate, jobs                    <-  scheduling (cron, the batch scheduler)
    substrate, servers, jobs           <-  aio  <-  app (Task.aenqueue, App.aconn)
    substrate                          <-  archive
    substrate                          <-  servers (the launchers: errors alone)
    the library                        <-  faces (cli, web, ``python -m echomq``)

The substrate starts no server: the facade (``echomq.connect()`` without a URL) and the
CLI find the folder's shared one. No module keeps an old address for another (no table
of exceptions): every module has one path, every name one home, and the only entry point
is ``python -m echomq``.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "echomq"

PARTS: dict[str, tuple[str, ...]] = {
    "substrate": ("echomq.errors", "echomq.models", "echomq.progress", "echomq.queue",
                  "echomq.records", "echomq.tracing"),
    "servers": ("echomq.servers",),
    "jobs": ("echomq.jobs", "echomq.cancel"),
    "scheduling": ("echomq.scheduling",),
    "worker": ("echomq.worker",),
    "app": ("echomq.app",),
    "aio": ("echomq.aio",),
    "archive": ("echomq.archive",),
    "metrics": ("echomq.prometheus",),
    "faces": ("echomq.cli", "echomq.__main__", "echomq.web"),
    "facade": ("echomq",),
}
"""Longest prefix wins: ``echomq.__main__`` is a face."""

ALLOWED: dict[str, set[str]] = {
    "substrate": {"substrate"},
    "servers": {"servers", "substrate"},  # errors alone (tests/cli/test_cli_faces.py)
    "jobs": {"substrate", "jobs"},
    "worker": {"substrate", "jobs", "worker"},
    # aio: Task.aenqueue and App.aconn reach it (lazily); it never imports the App
    "app": {"substrate", "servers", "jobs", "worker", "app", "aio"},
    "aio": {"substrate", "servers", "jobs", "aio"},
    "scheduling": {"substrate", "jobs", "scheduling"},
    "archive": {"substrate", "archive"},
    "metrics": {"substrate", "archive", "metrics"},
    "faces": set(PARTS),
    # archive and scheduling: lazily, on first use
    "facade": {"substrate", "jobs", "scheduling", "worker", "app", "archive", "aio"},
}


def part_of(module: str) -> str:
    best = max(
        ((name, prefix) for name, prefixes in PARTS.items() for prefix in prefixes
         if module == prefix or module.startswith(prefix + ".")),
        key=lambda pair: len(pair[1]),
    )
    return best[0]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(path) for path in PACKAGE.rglob("*.py")}


def imports_of(path: Path, module: str) -> set[str]:
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            submodules = {f"{target}.{alias.name}" for alias in node.names}
            found.update((submodules & MODULES) or {target})
    return {name for name in found if name == "echomq" or name.startswith("echomq.")}


@cache
def arrows() -> list[tuple[str, str]]:
    pairs = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        pairs += [(module, target) for target in sorted(imports_of(path, module))]
    return pairs


def test_the_scan_sees_the_arrows_it_judges() -> None:
    found = arrows()
    assert ("echomq.archive.driver", "echomq.queue.declared") in found
    assert ("echomq.scheduling.scheduler", "echomq.scheduling.cron") in found
    assert len(found) > 100


@pytest.mark.parametrize("source", sorted({s for s, _ in arrows()}))
def test_every_import_runs_the_allowed_way(source: str) -> None:
    allowed = ALLOWED[part_of(source)]
    wrong = [target for s, target in arrows()
             if s == source and part_of(target) not in allowed]
    assert not wrong, f"{source} ({part_of(source)}) may not import {wrong}"


# Where a queue's key names may be built from its name alone: everywhere else goes through
# ``conn.keys(queue)``, so that no key escapes the connection's prefix.
KEY_BUILDERS = {"echomq.queue.keys", "echomq.queue.connection", "echomq.aio.connection"}


def test_library_code_names_keys_through_the_connection() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        module = module_name(path)
        if module in KEY_BUILDERS:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if "Keys(" in code or '"emq:' in code or "'emq:" in code:
                offenders.append(f"{module}:{n}: {line.strip()}")
    assert offenders == []


def test_every_name_has_one_address() -> None:
    """No ``from x import Name as Name``: a name is imported from its home, never through a
    module that re-exports it for an old path (the public faces list theirs in
    ``__all__``)."""
    aliases = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                aliases += [f"{module_name(path)}: {alias.name}" for alias in node.names
                            if alias.asname == alias.name]
    assert aliases == []


def test_the_only_entry_point_is_python_m_echomq() -> None:
    """``python -m echomq`` (the ``emq`` command) is the one entry point: no library
    package runs a command or a server when run as a module."""
    mains = sorted(module_name(path) for path in PACKAGE.rglob("__main__.py"))
    assert mains == ["echomq.__main__"]
