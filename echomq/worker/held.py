"""What a Consumer holds: every claimed job until it leaves its hands, and the hand-back.

One ledger owns the held jobs, the count of slots they take and the locks that
order a job's start, finish and hand-back against the beat's renewal. The claim
loop adds to it, the handler threads, the beat and the settler let go of jobs
through it, and a stop hands back what it still holds, so nothing climbs back
into the Consumer to free a slot.
"""

from __future__ import annotations

import logging
import queue as stdlib_queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis

from echomq.errors import EchoMQError
from echomq.jobs.settle import release_many
from echomq.queue.connection import Connection
from echomq.worker.context import JobContext

log = logging.getLogger("echomq.consumer")

STOP = object()
"""Put on a thread's queue to end it once what is ahead of it is done."""

EARLY_CANCEL_S = 10.0
"""How long a cancel for a job this Consumer does not hold is kept. A cancel is published
once the job is active in Redis, which can be before this Consumer has taken the claim's
reply in; it applies when the job arrives. Other Consumers' jobs age out unused."""


class Held:
    """The jobs one Consumer holds, buffered or running."""

    def __init__(self, conn: Connection, *,
                 on_held: Callable[[list[JobContext]], None] | None = None,
                 on_released: Callable[[list[JobContext]], None] | None = None) -> None:
        self.conn = conn
        self.on_held = on_held
        """Told of each batch of jobs as it is taken into hands (before any can start), so
        a process supervisor can settle them if this process dies."""
        self.on_released = on_released
        """Told of each job once it left these hands (settled, lost or handed back)."""
        self.jobs: dict[tuple[str, str], JobContext] = {}
        """Every job held, buffered or running, by (queue, id), until it leaves this
        Consumer's hands."""
        self.inflight = 0
        self.settling = 0
        """Of ``inflight``, the jobs whose settle round trip is on its way: done, and
        only waiting for the server's answer to leave these hands."""
        self.slots = threading.Condition()
        """Guards ``inflight`` and ``settling``; notified whenever a slot frees."""
        self._early: dict[tuple[str, str], tuple[float, str | None]] = {}
        """Cancels for jobs not held (yet), by (queue, id), oldest first: (when, reason)."""
        self._early_lock = threading.Lock()
        self.lock = threading.Lock()
        """Orders a job's start, its finish and a stop's hand-back against each other and
        against the beat's renewal, so a renewal that finds a lease gone lands first."""

    def add(self, jobs: list[JobContext]) -> None:
        """Take newly claimed jobs into this Consumer's hands (with any cancel that was
        published for them before they arrived)."""
        with self.slots:
            self.inflight += len(jobs)
        with self._early_lock:
            for job in jobs:
                self.jobs[job.queue, job.id] = job
                early = self._early.pop((job.queue, job.id), None) if self._early else None
                if early is not None:
                    job.signal_cancel(early[1])
        if self.on_held is not None:
            self.on_held(jobs)

    def cancel(self, queue: str, job_id: str, reason: str | None) -> JobContext | None:
        """Set the cancel token of ``job_id`` of ``queue`` when held (returned); else keep
        the request for :data:`EARLY_CANCEL_S`, in case the job is on its way in."""
        held = (queue, job_id)
        with self._early_lock:
            job = self.jobs.get(held)
            if job is None:
                now = time.monotonic()
                while self._early:  # oldest first: drop what aged out
                    oldest = next(iter(self._early))
                    if now - self._early[oldest][0] < EARLY_CANCEL_S:
                        break
                    del self._early[oldest]
                self._early.pop(held, None)
                self._early[held] = (now, reason)
                return None
        job.signal_cancel(reason)
        return job

    def settling_now(self, jobs: int) -> None:
        """The settler sends (or, with 0, has answered) a round trip of ``jobs``: the claim
        loop may count them as leaving, so that the next claim overlaps the settle."""
        with self.slots:
            self.settling = jobs
            if jobs:
                self.slots.notify_all()

    def let_go(self, job: JobContext) -> None:
        """A job left this Consumer's hands (settled, lost or handed back): free its slot once."""
        self.let_go_many((job,))

    def let_go_many(self, jobs: Iterable[JobContext]) -> None:
        """:meth:`let_go` for a batch (a settle round trip's): one lock and one wake-up of
        the claim loop for all of them, not one each."""
        with self.slots:
            freed = [job for job in jobs if not job.finished]
            if not freed:
                return
            for job in freed:
                job.finished = True
            self.inflight -= len(freed)
            self.slots.notify_all()
        held = self.jobs
        for job in freed:
            if held.get((job.queue, job.id)) is job:
                del held[job.queue, job.id]
        if self.on_released is not None:
            self.on_released(freed)

    def unfinished(self, *, started_too: bool) -> list[JobContext]:
        """Held jobs not yet let go of: the buffered ones (and the running ones with
        ``started_too``). Call under ``lock`` to act on them before a start."""
        return [j for j in list(self.jobs.values())
                if not j.finished and (started_too or not j.started)]

    def wait_drained(self, deadline: float, force: threading.Event) -> None:
        """Wait until no handler runs, the monotonic ``deadline`` passes or ``force`` is set."""
        with self.slots:
            while self.inflight > 0 and not force.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self.slots.wait(min(remaining, 0.1))

    # -- handing back ----------------------------------------------------------------

    def take_unfinished(self, *, finished_too: bool = False) -> list[JobContext]:
        """The running jobs whose handlers have not returned (with ``finished_too``, all
        still held), let go of at once, so an outcome that arrives after the hand-back
        is dropped rather than settled."""
        with self.lock:
            jobs = [j for j in list(self.jobs.values())
                    if not j.finished and (finished_too or not j.done)]
            for job in jobs:
                self.let_go(job)
        return jobs

    def hand_back(self, jobs: Iterable[JobContext]) -> None:
        """Release ``jobs`` to the front of their queues' pending so another worker takes
        them at once; with the server gone their leases lapse instead."""
        by_queue: dict[str, list[JobContext]] = {}
        for job in jobs:
            by_queue.setdefault(job.queue, []).append(job)
        for queue, queued in by_queue.items():
            try:
                release_many(self.conn, queue, [(job.id, job.token) for job in queued])
                log.info("handed back %d unfinished job(s) of %r", len(queued), queue)
            except (EchoMQError, redis.RedisError) as exc:
                log.warning("could not hand back %d job(s) of %r; their leases will lapse: "
                            "%s", len(queued), queue, exc)
            for job in queued:
                self.let_go(job)


def take_unstarted(work: stdlib_queue.SimpleQueue[Any]) -> list[JobContext]:
    """Empty the buffer: the jobs no handler thread will start now."""
    unstarted: list[JobContext] = []
    while True:
        try:
            item = work.get_nowait()
        except stdlib_queue.Empty:
            return unstarted
        if isinstance(item, JobContext) and not item.finished:
            unstarted.append(item)
