"""The handler slots: threads that take jobs from the buffer, run them and pass on
their outcomes.

A slot takes a job only while it is still the Consumer's (a stop may have handed it
back, a renewal may have found its lease gone), renews a lease that waited in the
buffer for over a quarter of its length, runs the handler (inside its span when
tracing is on) under the watchdog when the job has a timeout, and gives the outcome to
the settler, unless a stop handed the job back or the watchdog settled it meanwhile.

A run past its timeout plus grace is settled as failed without its thread; the thread
is abandoned (it ends when its handler returns, whose outcome the fencing token would
refuse anyway) and a new one takes its slot. Past ``max_abandoned`` stuck threads the
Consumer stops gracefully so that its supervisor starts a fresh process.
"""

from __future__ import annotations

import logging
import queue as stdlib_queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any

import redis

from echomq import tracing
from echomq.errors import EchoMQError, JobTimeout
from echomq.jobs.lease import extend_lock
from echomq.queue import worker_events
from echomq.queue.connection import Connection
from echomq.queue.transitions.leases import LEASE_LOST
from echomq.worker.context import (
    FailurePolicy,
    HandlerOutcome,
    JobContext,
    execute,
    failure,
    timeout_message,
)
from echomq.worker.held import STOP, Held
from echomq.worker.watchdog import Watchdog

if TYPE_CHECKING:
    from echomq.worker.event_loop import EventLoop

Timeouts = Callable[[JobContext], "tuple[float, float] | None"]
"""A job's ``(timeout_s, grace_s)``, or None for no timeout (an App's tasks say)."""


@dataclass
class TimeoutRules:
    """How a Consumer bounds a run: ``timeouts`` per job, and what happens to a run still
    going at its timeout plus grace: ``abandon`` its thread, or ``exit`` the process (a
    supervised child with one slot, which its supervisor replaces)."""

    timeouts: Timeouts
    hard: str = "abandon"
    max_abandoned: int = 4

log = logging.getLogger("echomq.consumer")


class HandlerSlots:
    """What every handler thread of one Consumer runs (:meth:`run`)."""

    def __init__(self, conn: Connection, handler: Callable[[JobContext], Any], held: Held,
                 work: stdlib_queue.SimpleQueue[Any], *, lease_ms: int, result_limit: int,
                 policy: FailurePolicy | None, observe: Callable[[float], None],
                 finish: Callable[[HandlerOutcome], None],
                 rules: TimeoutRules | None = None,
                 spawn: Callable[[], None] | None = None,
                 give_up: Callable[[str], None] | None = None) -> None:
        self.conn = conn
        self.handler = handler
        self.held = held
        self.work = work
        self.lease_ms = lease_ms
        self._fresh_s = 0.75 * lease_ms / 1000
        """A buffered job with more of its lease left than this starts without a renewal."""
        self.result_limit = result_limit
        self.policy = policy
        self.observe = observe
        self.finish = finish
        self.rules = rules
        self.spawn = spawn
        """Starts one more handler thread (to take an abandoned one's slot)."""
        self.give_up = give_up
        """Stops the Consumer gracefully, with the reason (too many abandoned threads)."""
        self.watchdog = (Watchdog(self.hard_timeout, self._timed_out) if rules is not None
                         else None)
        self.abandoned: set[threading.Thread] = set()
        """Handler threads whose job was settled without them; each ends when it returns."""
        self.abandoned_total = 0
        self._loop: EventLoop | None = None
        self._loop_lock = threading.Lock()

    def run(self) -> None:
        """Run jobs from the buffer until a ``STOP`` comes (or this thread was abandoned)."""
        work, handler, clock, limit = self.work, self.handler, perf_counter, self.result_limit
        observe, policy, rules = self.observe, self.policy, self.rules
        while True:
            job = work.get()
            if job is STOP:
                return
            if not self._begin(job):
                continue
            limits = rules.timeouts(job) if rules is not None else None
            if limits is not None:
                job.runner = threading.current_thread()
                job.timeout_s = limits[0]
                assert self.watchdog is not None
                self.watchdog.watch(job, *limits)
            started = clock()
            traced = tracing.current()
            if traced is None:
                outcome = execute(handler, job, limit, policy)
            else:
                outcome = self._traced(traced, job)
            if outcome.coro is not None:  # an async task: it runs on the event loop
                job.runner = None
                self.event_loop().submit(job, outcome.coro)
                continue
            job.ran_s = clock() - started
            if limits is not None:
                assert self.watchdog is not None
                self.watchdog.unwatch(job)
            observe(job.ran_s)
            self._finish(outcome)
            if job.runner is not None and job.runner in self.abandoned:
                self.abandoned.discard(job.runner)
                return  # another thread took this slot

    def event_loop(self) -> EventLoop:
        """The worker's event loop for async tasks, started on the first one."""
        if self._loop is None:
            with self._loop_lock:
                if self._loop is None:
                    from echomq.worker.event_loop import EventLoop

                    self._loop = EventLoop(result_limit=self.result_limit, policy=self.policy,
                                           finish=self._ended_async, ended=self._unwatch)
        return self._loop

    def _ended_async(self, outcome: HandlerOutcome) -> None:
        self.observe(outcome.job.ran_s)
        self._finish(outcome)

    def _unwatch(self, job: JobContext) -> None:
        if self.watchdog is not None and job.timeout_s is not None:  # watched: it has one
            self.watchdog.unwatch(job)

    def stop(self) -> None:
        """Stop the event loop, if one started (the Consumer waited for running jobs)."""
        if self._loop is not None:
            self._loop.stop()

    def _traced(self, traced: tracing.Tracing, job: JobContext) -> HandlerOutcome:
        """Run the handler inside its span, the child of the producer's (tracing on)."""
        job.span = traced.process(job.queue, job.id, job.attempts, job.traceparent)
        with traced.running(job.span):
            outcome = execute(self.handler, job, self.result_limit, self.policy)
        traced.outcome(job.span, outcome.kind, outcome.text)
        return outcome

    def _begin(self, job: JobContext) -> bool:
        """Take a job from the buffer: False when it is no longer ours to run (its
        lease was found gone, or a stop handed it back). A job that sat in the buffer
        for over a quarter of its lease is renewed first, so its handler gets most
        of a lease however long it waited."""
        with self.held.lock:  # a renewal of this job in flight lands before it starts
            if job.finished:
                return False
            job.started = True
        if job.deadline - time.monotonic() >= self._fresh_s:
            return True
        sent = time.monotonic()
        try:
            extend_lock(self.conn, job.queue, job.id, job.token, self.lease_ms)
        except LEASE_LOST as exc:
            log.warning("job %s not started: its lease is gone (%s)", job.id, exc)
            self.held.let_go(job)
            return False
        except (EchoMQError, redis.RedisError) as exc:
            log.warning("job %s: could not renew its lease before starting (%s)", job.id, exc)
            return True
        job.deadline = sent + self.lease_ms / 1000
        return True

    def _finish(self, outcome: HandlerOutcome) -> None:
        """Pass an outcome to the settler, unless a stop already handed its job back or
        the watchdog settled it past its timeout."""
        with self.held.lock:
            if outcome.job.finished or outcome.job.done:
                log.info("job %s finished after it was %s; outcome dropped", outcome.job.id,
                         "abandoned at its timeout" if outcome.job.done else "handed back")
                return
            outcome.job.done = True
            self.finish(outcome)

    def _timed_out(self, job: JobContext) -> None:
        worker_events.count(self.conn, [job.queue], "timeouts")

    def hard_timeout(self, job: JobContext) -> None:
        """The watchdog's call for a run still going at its timeout plus grace: settle it
        as failed without its thread, and give its slot to a new thread (or, in a
        process of its own, end the process: its supervisor replaces it)."""
        assert self.rules is not None
        exiting = self.rules.hard == "exit"
        with self.held.lock:
            if job.finished or job.done:
                return
            job.done = True
            self.finish(failure(job, JobTimeout(timeout_message(
                job, "killed" if exiting else "abandoned")), self.policy))
        worker_events.count(self.conn, [job.queue], "killed" if exiting else "abandoned")
        if exiting:
            if self.give_up is not None:
                self.give_up("exit")
            return
        thread = job.runner
        if thread is None:  # a coroutine that swallowed its cancel: no thread to replace
            log.error("job %s/%s: its coroutine is still running at its timeout plus grace; "
                      "settled as failed", job.queue, job.id)
            return
        self.abandoned.add(thread)
        self.abandoned_total += 1
        stuck = sum(1 for t in list(self.abandoned) if t.is_alive())
        log.error("job %s/%s: still running at its timeout plus grace; settled as failed, "
                  "its thread abandoned (%d stuck)", job.queue, job.id, stuck)
        if stuck > self.rules.max_abandoned and self.give_up is not None:
            self.give_up(f"{stuck} handler threads are stuck past their timeouts (more than "
                         f"max_abandoned={self.rules.max_abandoned}): restart the worker")
            return
        if self.spawn is not None:
            self.spawn()
