"""The version is written in one place, pyproject.toml, and ``echomq.__version__`` reads it.

Two copies drift: the one a release bumps and the one it forgets. So the package asks
the installed distribution's metadata (what pip recorded from pyproject) and no other
file of the tree spells a version out.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version

import echomq
from tests.support import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_package_version_is_pyprojects() -> None:
    declared = PYPROJECT["project"]["version"]
    assert echomq.__version__ == declared == version("echomq")
    from echomq import __version__  # the from-import form reads it too

    assert __version__ == declared


def test_no_other_file_writes_a_version() -> None:
    """Issue 21: ``echomq/__init__.py`` held ``__version__ = "0.1.0"`` beside pyproject's."""
    written = re.compile(r"""^\s*(__version__|version)\s*[:=][^=\n]*["']\d+\.\d+""", re.M)
    sources = [ROOT / "setup.py", *sorted((ROOT / "echomq").rglob("*.py"))]
    offenders = [str(path.relative_to(ROOT)) for path in sources
                 if written.search(path.read_text())]
    assert offenders == []
    assert "version" not in PYPROJECT["project"].get("dynamic", [])
