"""The driver's interior, composed like the worker: a fold's report frozen once it ends,
and the driver's modules small, not assembled by inheritance, and in no import cycle
(upload.py once imported the driver back for its tally)."""

from __future__ import annotations

import ast
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from echomq.archive import Driver, S3Remote
from tests.support.recorder import Recorder

ARCHIVE = Path(__file__).resolve().parents[2] / "echomq" / "archive"
DRIVER_SIDE = ("driver", "fold", "upload", "custody", "sharing", "stream_checks", "report",
               "stream_ids")


def test_a_fold_report_is_frozen_once_the_fold_ends(rec: Recorder, weed_remote: S3Remote,
                                                     tmp_path: Path) -> None:
    rec.add(7)
    with Driver(rec.conn, tmp_path / "floor", weed_remote, slice_count=3) as driver:
        report = driver.fold(rec.queue)
    assert (report.entries, report.slices, report.uploaded, report.trimmed) == (7, 3, 3, 7)
    with pytest.raises(FrozenInstanceError):
        report.trimmed = 0
    with pytest.raises(FrozenInstanceError):
        del report.error
    held = replace(report, held_by="another")  # a changed copy, the report untouched
    assert (held.held_by, report.held_by, held.entries) == ("another", None, 7)


def _imports(module: str) -> set[str]:
    tree = ast.parse((ARCHIVE / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):  # every import, those under TYPE_CHECKING included
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return {m.rsplit(".", 1)[-1] for m in found if m.startswith("echomq.archive.")}


def test_no_module_of_the_driver_side_imports_one_that_imports_it() -> None:
    names = {p.stem for p in ARCHIVE.glob("*.py")}
    reach: dict[str, set[str]] = {name: _imports(name) & names for name in names}
    changed = True
    while changed:  # the transitive closure of the archive's imports
        changed = False
        for seen in reach.values():
            more = set().union(*(reach[m] for m in seen)) - seen
            if more:
                seen |= more
                changed = True
    cycles = [name for name in DRIVER_SIDE if name in reach[name]]
    assert not cycles, f"modules that import themselves back: {cycles}"


def test_the_driver_side_keeps_its_modules_and_classes_small() -> None:
    for name in DRIVER_SIDE:
        source = (ARCHIVE / f"{name}.py").read_text()
        assert len(source.splitlines()) <= 400, f"{name}.py is over 400 lines"
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                assert size <= 250, f"{name}.{node.name} is {size} lines"
                assert not node.bases or name == "report", (
                    f"{name}.{node.name} is assembled by inheritance")
