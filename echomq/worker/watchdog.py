"""Timeouts: one thread that watches every running job that has one.

At ``timeout_s`` of a job's own run (not its wait in the buffer) its cancel token fires
with the reason ``timeout``: a cooperative task stops at its next check, and its run
ends as a failed attempt. ``grace_s`` later, a run that still has not returned is ended
from outside (``on_hard``): its handler thread may be stuck in C (a ``time.sleep``, a
socket read with no timeout), which no Python code can interrupt, so the job is settled
as failed without it and the thread is abandoned (or, in a process of its own, the
process exits and its supervisor replaces it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from echomq.worker.context import JobContext

log = logging.getLogger("echomq.consumer")

TIMEOUT_REASON = "timeout"
"""The cancel reason a job's token gets when its run reaches its timeout."""


class Watchdog:
    """Soft and hard deadlines of the running jobs, checked on one thread."""

    def __init__(self, on_hard: Callable[[JobContext], None],
                 on_soft: Callable[[JobContext], None] | None = None) -> None:
        self.on_hard = on_hard
        self.on_soft = on_soft
        self._watched: dict[int, tuple[JobContext, float, float]] = {}
        """By ``id(job)``: the job, its soft deadline and its hard one (monotonic)."""
        self._changed = threading.Condition()
        self.timeouts = 0
        """Runs that reached their timeout (the token fired)."""

    def watch(self, job: JobContext, timeout_s: float, grace_s: float) -> None:
        """Start ``job``'s clock now (its run begins)."""
        now = time.monotonic()
        with self._changed:
            self._watched[id(job)] = (job, now + timeout_s, now + timeout_s + grace_s)
            self._changed.notify()

    def unwatch(self, job: JobContext) -> None:
        """``job``'s run returned."""
        with self._changed:
            self._watched.pop(id(job), None)

    def run(self, stop: threading.Event) -> None:
        """Fire deadlines until ``stop``."""
        while not stop.is_set():
            hard: list[JobContext] = []
            soft: list[JobContext] = []
            with self._changed:
                now = time.monotonic()
                nearest = now + 0.5
                for key, (job, soft_at, hard_at) in list(self._watched.items()):
                    if now >= hard_at:
                        del self._watched[key]
                        hard.append(job)
                        continue
                    if now >= soft_at and not job.timed_out:
                        job.timed_out = True
                        self.timeouts += 1
                        job.signal_cancel(TIMEOUT_REASON)
                        soft.append(job)
                        log.warning("job %s/%s reached its timeout; cancelling it", job.queue,
                                    job.id)
                    nearest = min(nearest, hard_at if job.timed_out else soft_at)
                if not hard:
                    self._changed.wait(max(0.001, nearest - now))
            for job in soft:
                if self.on_soft is not None:
                    self.on_soft(job)
            for job in hard:
                self.on_hard(job)

    def stop(self) -> None:
        with self._changed:
            self._changed.notify_all()
