"""Handlers the worker-process tests run through ``emq worker tests.support.workers:NAME``."""

from __future__ import annotations

import time
from typing import Any


def slow(job: Any) -> dict[str, Any]:
    """Takes a little while, so a kill -9 lands mid-handler."""
    time.sleep(0.02)
    return {"done": job.payload["n"]}


def sleepy(job: Any) -> None:
    """Runs far longer than any test waits, unless the worker hands it back."""
    time.sleep(30)
