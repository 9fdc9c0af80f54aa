"""The values a worker meets: the state enum, the claimed job, a handler's cancel verdict and
a stalled sweep's answer. The records the read verbs return (``Job``, ``Counts``...) live in
:mod:`echomq.records`, which a worker never loads: each frozen dataclass costs ~0.5 ms to
build at import (its methods are compiled), and a plain Consumer's start used 4 of 12."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class JobState(StrEnum):
    PENDING = "pending"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    COMPLETED = "completed"
    DEAD = "dead"
    WAITING = "waiting"
    """A flow's parent: its children have not all settled yet (``echomq.chord``)."""


@dataclass(frozen=True)
class ClaimedJob:
    """A job a worker now holds. ``token`` is the fencing token every settle needs."""

    id: str
    token: int
    payload: Any
    lease_deadline_ms: int
    name: str | None = None
    """The job's name (``add(name=)``): the task a worker routes it to."""

    @property
    def attempts(self) -> int:
        """The claim count: the token is the row's ``attempts`` at claim time."""
        return self.token


CANCELLED_PREFIX = "cancelled:"
"""How a cancelled job's result is stored on its row: the prefix, then the reason."""


@dataclass(frozen=True)
class StalledSweep:
    """One sweep's answer: ids recovered to pending and ids dead-lettered."""

    recovered: list[str]
    dead: list[str]


@dataclass(frozen=True)
class CancelVerdict:
    """Return this from a handler to settle its job as ``cancelled:<reason>``."""

    reason: str | None = None


def id_list(text: str | None) -> list[str]:
    """A flow parent's ``children`` (a JSON array of ids) as a list; [] when absent or not
    such an array."""
    if not text:
        return []
    try:
        found = json.loads(text)
    except ValueError:
        return []
    return [str(i) for i in found] if isinstance(found, list) else []
