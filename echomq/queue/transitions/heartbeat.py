"""The catalogue's heartbeat: a worker's record on the server (``worker_beat``,
``worker_leave``), the dashboard's Workers page and ``echomq.workers`` read it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from echomq.queue.executors import Call
from echomq.queue.keys import worker_record, workers_set

KEEP_BEATS = 40
"""Its record lapses this many beats after its last (a default worker beats every 15 s:
ten minutes), so a killed worker is seen gone, with what it held, for a while."""
LISTED = 100
"""Queues, tasks and held jobs a record lists (with the counts of all)."""


def beat_call(prefix: str, worker_id: str, keep_ms: int, fields: Mapping[str, str | int]
              ) -> Call:
    """worker_beat-2.lua: write ``fields`` into the worker's record, stamp its last beat
    (and its start, once) on the server clock, let it lapse ``keep_ms`` after this beat."""
    args: list[str | int] = [worker_id, keep_ms]
    for name, value in fields.items():
        args += [name, value]
    return ("worker_beat", [workers_set(prefix), worker_record(prefix, worker_id)], args)


def beaten(reply: Any) -> BaseException | None:
    """worker_beat's reply: None when written, else the error met (never raises: a beat
    that failed to write its record must not cost a lease renewal beside it)."""
    return reply if isinstance(reply, BaseException) else None


def leave_call(prefix: str, worker_id: str) -> Call:
    """worker_leave-2.lua: remove the worker's record and its place in the set."""
    return ("worker_leave", [workers_set(prefix), worker_record(prefix, worker_id)],
            [worker_id])


def left(reply: Any) -> bool:
    """worker_leave's reply: whether the record was still there."""
    return bool(int(reply))
