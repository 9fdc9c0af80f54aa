"""The floor is composed, not stacked: it has a store and calls functions over a
transaction, and each of its parts stays small enough to read in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

from echomq.archive import Floor, floor
from echomq.archive.lmdbstore import LmdbStore

MAX_CLASS_LINES = 265
MAX_MODULE_LINES = 400
PARTS = sorted(Path(floor.__file__).parent.glob("floor*.py")) + [
    Path(floor.__file__).parent / "lmdbstore.py"]


def test_the_floor_has_a_store_rather_than_being_one(tmp_path: Path) -> None:
    assert Floor.__bases__ == (object,)
    with Floor(tmp_path / "floor") as opened:
        assert isinstance(opened.store, LmdbStore)
        assert opened.path == opened.store.path and opened.env is opened.store.env


def test_no_floor_module_or_class_is_too_long() -> None:
    too_long = []
    for path in PARTS:
        source = path.read_text()
        if len(source.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{path.name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    too_long.append(f"{path.name}: class {node.name}, {lines} lines")
    assert not too_long


def test_the_floor_keeps_its_public_surface(tmp_path: Path) -> None:
    """What the driver, restore, prune, the dashboard, the CLI and the tests call."""
    with Floor(tmp_path / "floor") as opened:
        public = {name for name in dir(opened) if not name.startswith("_")}
    assert public >= {
        "acknowledge_gaps", "anchor_accounted", "audit", "base", "check_in_place",
        "checkpoint", "close", "commit_slice", "commit_slices", "digest", "digest_before",
        "drop_pending", "drop_through", "entries", "env", "export", "export_jsonl",
        "format_version", "gap_baseline", "gaps", "grows", "history", "identity",
        "keep_digest", "last_digest", "last_fold", "lines", "mark_uploaded",
        "path", "pending_slices", "quarantined", "queues", "query", "record_address", "record_fold",
        "record_gap", "record_trim", "safe_trim_point", "size_bytes", "slice_bytes",
        "slices", "status", "uploaded_slices"}
