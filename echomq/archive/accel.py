"""The fold's optional C accelerator (``_fold.c``), or ``None`` to run the Python path.

The fold spends most of its time in two per-entry loops: turning an ``XRANGE`` page into
items with their canonical lines (``stream_read.take``), and turning a slice's items into
the floor's index rows (``floor_rows.index_rows``). ``_fold.c`` does both for entries of the
common shape and hands every other entry to the Python code, so both paths write the same
bytes (tests/archive/test_fold_accel.py holds them equal). It is built by ``pip install``
where a C compiler is found; without one, or with ``ECHOMQ_PURE_PYTHON=1`` in the
environment, the fold runs in Python alone, about half as fast.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

log = logging.getLogger(__name__)

PURE_PYTHON_ENV = "ECHOMQ_PURE_PYTHON"
INTERFACE = 1
"""The ``INTERFACE`` of the ``_fold.c`` this code calls."""


def _load() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from echomq.archive import _fold  # type: ignore[attr-defined]
    except ImportError:
        return None
    if getattr(_fold, "INTERFACE", None) != INTERFACE:
        log.warning("echomq: %s was built from another version of _fold.c; the fold runs "
                    "in Python until it is rebuilt (pip install again)",
                    getattr(_fold, "__file__", _fold.__name__))
        return None
    return _fold  # type: ignore[no-any-return]


FOLD = _load()
"""The compiled module (``take``, ``rows``, ``name_ok``), or None."""
