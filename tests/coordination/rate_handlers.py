"""Handlers the rate-limit tests run in worker processes (``emq worker
tests.coordination.rate_handlers:NAME``)."""

from __future__ import annotations

from typing import Any


def quick(job: Any) -> None:
    """Returns at once: a worker's only pace is the rate limit."""
