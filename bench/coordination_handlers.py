"""The handler the coordination bench's worker processes run (``emq worker
coordination_handlers:quick``, with ``bench/`` on the path)."""

from __future__ import annotations

from typing import Any


def quick(job: Any) -> None:
    """Returns at once: the rate limit is the workers' only pace."""
