"""Small modules, one job each: no module of ``echomq/`` over ``MAX_MODULE_LINES`` lines and
no class over ``MAX_CLASS_LINES`` (measured with ``ast``: a class from its ``class`` line
to its last, docstrings and comments included), so a part that grows is split by concern
(a package, a collaborator it has, a module of functions) before it is hard to read."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "echomq"
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250


def _sources() -> dict[str, str]:
    found = {str(path.relative_to(PACKAGE.parent)): path.read_text(encoding="utf-8")
             for path in sorted(PACKAGE.rglob("*.py"))}
    assert len(found) > 100, "the scan must see the package"
    return found


def test_no_module_is_over_the_limit() -> None:
    over = [f"{name}: {len(text.splitlines())} lines"
            for name, text in _sources().items()
            if len(text.splitlines()) > MAX_MODULE_LINES]
    assert not over, (f"modules over {MAX_MODULE_LINES} lines (split them by concern): "
                      + "; ".join(over))


def test_no_class_is_over_the_limit() -> None:
    over = []
    for name, text in _sources().items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    over.append(f"{name}:{node.lineno} class {node.name}: {size} lines")
    assert not over, (f"classes over {MAX_CLASS_LINES} lines (move a cohesive group of "
                      "methods into a collaborator or a module of functions): "
                      + "; ".join(over))
