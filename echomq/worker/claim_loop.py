"""The claim loop: take a batch (ONE round trip) whenever enough slots are free.

Over several queues, a round asks them in the order the ``QueuePlan`` gives (strict
priority, or weighted shares) until the free slots are filled, one claim call per queue
asked. A queue that answered empty is skipped for :data:`EMPTY_SKIP_S` unless an add
into it is announced first, so a busy queue behind idle ones does not pay a wasted round
trip per idle queue on every round; a round that finds every queue empty parks until an
add wakes it or a scheduled job falls due. Claimed jobs go into the Consumer's ``Held``
ledger and onto the buffer the handler threads read. With ``prefetch=None`` the buffer
adapts to the observed handler time, so many short jobs get deep buffers and batched
round trips and long ones get shallow buffers whose leases do not lapse before they run.
A queue whose rate limit holds it back (the claim answers when its next slot opens) is
left out of the rounds until then, and a loop with nothing else to do sleeps until then
(a stop, or an announced add, wakes it first): it never polls a limited queue.
"""

from __future__ import annotations

import logging
import queue as stdlib_queue
import threading
import time
from typing import Any

import redis

from echomq import tracing
from echomq.errors import ConnectionFailed
from echomq.queue.cluster import slot_time
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys
from echomq.queue.transitions import intake, rates
from echomq.worker.context import JobContext
from echomq.worker.held import Held
from echomq.worker.queues import QueuePlan

log = logging.getLogger("echomq.consumer")

EMPTY_SKIP_S = 0.05
"""How long a queue that answered a claim with nothing is left out of the rounds (an
announced add ends it at once; a scheduled job falling due waits at most this long)."""


class ClaimLoop:
    """Claims for one Consumer; runs on the thread that called ``Consumer.run``."""

    def __init__(
        self, conn: Connection, plan: QueuePlan, held: Held,
        work: stdlib_queue.SimpleQueue[Any], *, concurrency: int, lease_ms: int,
        batch_size: int, prefetch: int | None, poll_s: float,
    ) -> None:
        self.conn = conn
        self.plan = plan
        self.held = held
        self.work = work
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.batch_size = batch_size
        self.prefetch = prefetch
        self.poll_s = poll_s
        self.wake = threading.Event()
        """Set when a job is added to the queue (through pub/sub) or a stop comes."""
        self.stopped = threading.Event()
        """Set once :meth:`run` returned: no claim is in flight any more."""
        self.answered = threading.Event()
        """Set once the first claim round has its answer (or failed, or the loop ended):
        the beat's first round trips wait for it."""
        self._job_seconds = lease_ms / 1000  # a running estimate; pessimistic at first
        self._marks = threading.Lock()
        self._empty_until: dict[str, float] = {}
        """Queues that answered empty, and until when (monotonic) rounds skip them."""
        self._adds: dict[str, int] = dict.fromkeys(plan.names, 0)
        """Adds announced per queue: a claim that answered empty while one was announced
        does not mark its queue empty."""
        self._limited_until: dict[str, float] = {}
        """Queues a rate limit holds back, and until when (monotonic): not asked till then."""

    def added(self, queue: str) -> None:
        """An add into ``queue`` was announced (pub/sub): ask it again, wake the loop."""
        with self._marks:
            self._adds[queue] = self._adds.get(queue, 0) + 1
            self._empty_until.pop(queue, None)
            self._limited_until.pop(queue, None)
        self.wake.set()

    def run(self, stop: threading.Event) -> None:
        """Claim a batch whenever enough slots are free; park while every queue is empty."""
        try:
            self._run(stop)
        finally:
            self.answered.set()
            self.stopped.set()

    def _run(self, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            want = self._room(stop)
            if stop.is_set():
                return
            self.wake.clear()  # an add from here on wakes the idle wait below
            try:
                got = self._claim_round(want)
            except (ConnectionFailed, redis.RedisError) as exc:
                self.answered.set()
                failures += 1
                delay = min(5.0, 0.1 * 2**failures)
                log.warning("claim failed (%s); retrying in %.1fs", exc, delay)
                stop.wait(delay)
                continue
            self.answered.set()
            failures = 0
            if not got:
                self.wake.wait(self._idle_wait())

    def _claim_round(self, want: int) -> int:
        """Ask the plan's queues in order until ``want`` jobs are claimed; how many were."""
        got = 0
        several = len(self.plan.keys) > 1
        for keys in self.plan.round():
            queue = keys.queue
            if several and self._skipped(queue) or self._limited(queue):
                continue
            adds = self._adds.get(queue, 0)
            sent = time.monotonic()
            flat = self._claim(keys, want - got)
            wait_ms = rates.claim_wait_ms(flat) if flat else None
            if wait_ms is not None:
                self._mark_limited(queue, adds, wait_ms)
            elif flat:
                got += self._dispatch(queue, flat, sent + self.lease_ms / 1000)
                if got >= want:
                    break
            elif several:
                self._mark_empty(queue, adds, sent)
        if not got and several:
            with self._marks:  # parking: the next round, after a wake-up, asks every queue
                self._empty_until.clear()
        return got

    def _skipped(self, queue: str) -> bool:
        until = self._empty_until.get(queue)
        return until is not None and time.monotonic() < until

    def _limited(self, queue: str) -> bool:
        until = self._limited_until.get(queue)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        with self._marks:
            self._limited_until.pop(queue, None)
        return False

    def _mark_limited(self, queue: str, adds: int, wait_ms: int) -> None:
        with self._marks:
            if self._adds.get(queue, 0) == adds:  # an add since may be of another group
                self._limited_until[queue] = time.monotonic() + wait_ms / 1000

    def _next_open(self) -> tuple[float | None, bool]:
        """Seconds until the first rate-limited queue may be asked again (None: no queue
        is held back), and whether every queue is."""
        with self._marks:
            untils = [self._limited_until.get(name) for name in self.plan.names]
        held = [u for u in untils if u is not None]
        if not held:
            return None, False
        return max(0.0, min(held) - time.monotonic()), len(held) == len(untils)

    def _mark_empty(self, queue: str, adds: int, sent: float) -> None:
        with self._marks:
            if self._adds.get(queue, 0) == adds:  # no add announced since the claim left
                self._empty_until[queue] = sent + EMPTY_SKIP_S

    def _claim(self, keys: Keys, count: int) -> Any:
        call = intake.claim_call(keys, self.lease_ms, count)
        traced = tracing.current()
        if traced is None:
            return self.conn.executor.run(*call)
        with traced.claim(keys.queue) as span:
            flat = self.conn.executor.run(*call)
            span.set_attribute("messaging.batch.message_count",
                               (len(flat) - 1) // 4 if flat else 0)
            return flat

    def _room(self, stop: threading.Event) -> int:
        """Wait until enough slots are free to keep claims batched; how many to claim."""
        held, slots = self.held, self.held.slots
        with slots:
            limit = self._max_inflight()
            claim_at = max(1, min(self.batch_size, limit) // 2)
            while (held.inflight and limit - self._holding(limit) < claim_at
                   and not stop.is_set()):
                slots.wait(self.poll_s)
                limit = self._max_inflight()
            return min(limit - self._holding(limit), self.batch_size)

    def _holding(self, limit: int) -> int:
        """The held jobs that take a slot. Where the Consumer buffers (short jobs), a
        settle round trip on its way frees its jobs already, up to the buffer's depth
        and a claim batch, so the next claim is in the server while the settle is, not
        after it (no-op jobs at c=8: docs/benchmarks.md); one that holds only what it
        runs (long jobs, ``prefetch=0``) claims when the settle is answered."""
        buffer = limit - self.concurrency
        return self.held.inflight - min(self.held.settling, self.batch_size, buffer)

    def _max_inflight(self) -> int:
        """Running plus buffered jobs this Consumer may hold.

        With ``prefetch=None`` the buffer adapts: as many claimed jobs as the handlers
        should start within a quarter of the lease (by the observed handler time), at
        most two claim batches. Many short jobs get a deep buffer and batched round
        trips; long ones get a shallow one, so no buffered lease lapses before it runs.
        """
        if self.prefetch is not None:
            return self.concurrency + self.prefetch
        startable = self.concurrency * (self.lease_ms / 4000) / max(self._job_seconds, 1e-6)
        return self.concurrency + int(min(2 * self.batch_size, max(0.0, startable)))

    def observe(self, seconds: float) -> None:
        """Fold one handler run time into the estimate (a moving average)."""
        self._job_seconds += (seconds - self._job_seconds) * 0.2

    def _dispatch(self, queue: str, flat: list[Any], deadline: float) -> int:
        conn, lease_ms = self.conn, self.lease_ms
        jobs = [JobContext(conn, queue, job_id, token, raw, lease_ms, name, deadline)
                for job_id, token, raw, name in intake.claimed(flat)]
        if tracing.current() is not None:
            self._trace_contexts(jobs)
        self.held.add(jobs)
        for job in jobs:
            self.work.put(job)
        return len(jobs)

    def _trace_contexts(self, jobs: list[JobContext]) -> None:
        """The producers' trace contexts of a claimed batch (one round trip; tracing on)."""
        pipe = self.conn.redis.pipeline(transaction=False)
        for job in jobs:
            pipe.hget(self.plan.by_name[job.queue].job(job.id), "traceparent")
        try:
            found = pipe.execute()
        except redis.RedisError as exc:  # the jobs still run, as roots of their traces
            log.warning("could not read the trace contexts of %d job(s): %s", len(jobs), exc)
            return
        for job, traceparent in zip(jobs, found, strict=True):
            job.traceparent = traceparent

    def _idle_wait(self) -> float:
        """How long to park with nothing to do: the poll interval, or less when a
        scheduled job of any queue falls due sooner (an add wakes us earlier through
        pub/sub). When a rate limit holds back every queue: until the first one opens."""
        opens, every = self._next_open()
        if every and opens is not None:  # nothing may be asked before then: no round trip
            return max(0.001, opens)
        try:
            firsts, now_ms = self._first_due()
        except redis.RedisError:
            return self.poll_s
        due = [float(first[0][1]) for first in firsts if first]
        poll = self.poll_s if opens is None else min(self.poll_s, max(0.001, opens))
        if not due:
            return poll
        return max(0.005, min(poll, (min(due) - now_ms) / 1000))

    def _first_due(self) -> tuple[list[Any], int]:
        """The first scheduled member of each queue, and the server's clock in ms."""
        if self.conn.cluster:  # a Cluster pipeline has no keyless TIME: ask a slot's node
            firsts = [self.conn.redis.zrange(k.scheduled, 0, 0, withscores=True)
                      for k in self.plan.keys]
            secs, micros = slot_time(self.conn.redis, self.plan.keys[0].scheduled)
        else:
            pipe = self.conn.redis.pipeline(transaction=False)
            for k in self.plan.keys:
                pipe.zrange(k.scheduled, 0, 0, withscores=True)
            pipe.time()
            *firsts, (secs, micros) = pipe.execute()
        return firsts, int(secs) * 1000 + int(micros) // 1000
