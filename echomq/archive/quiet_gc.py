"""No cyclic garbage collection while one slice is in memory (the fold's and restore's
hot loops).

Tens of thousands of young, acyclic objects per slice would trigger collection passes that
find nothing and cost a third of the time. Reference counting still frees everything;
collection resumes after.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_gc() -> Iterator[None]:
    """Pause cyclic GC for the block (restored as it was, even on an error)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
