"""The handler slots: threads that take jobs from the buffer, run them and pass on
their outcomes.

A slot takes a job only while it is still the Consumer's (a stop may have handed it
back, a renewal may have found its lease gone), renews a lease that waited in the
buffer for over a quarter of its length, runs the handler (inside its span when
tracing is on) and gives the outcome to the settler, unless a stop handed the job back
meanwhile.
"""

from __future__ import annotations

import logging
import queue as stdlib_queue
import time
from collections.abc import Callable
from time import perf_counter
from typing import Any

import redis

from echomq import tracing
from echomq.errors import EchoMQError
from echomq.jobs.lease import extend_lock
from echomq.queue.connection import Connection
from echomq.queue.transitions import LEASE_LOST
from echomq.worker.context import FailurePolicy, HandlerOutcome, JobContext, execute
from echomq.worker.held import STOP, Held

log = logging.getLogger("echomq.consumer")


class HandlerSlots:
    """What every handler thread of one Consumer runs (:meth:`run`)."""

    def __init__(self, conn: Connection, handler: Callable[[JobContext], Any], held: Held,
                 work: stdlib_queue.SimpleQueue[Any], *, lease_ms: int, result_limit: int,
                 policy: FailurePolicy | None, observe: Callable[[float], None],
                 finish: Callable[[HandlerOutcome], None]) -> None:
        self.conn = conn
        self.handler = handler
        self.held = held
        self.work = work
        self.lease_ms = lease_ms
        self.result_limit = result_limit
        self.policy = policy
        self.observe = observe
        self.finish = finish

    def run(self) -> None:
        """Run jobs from the buffer until a ``STOP`` comes."""
        work, handler, clock, limit = self.work, self.handler, perf_counter, self.result_limit
        observe, policy = self.observe, self.policy
        while True:
            job = work.get()
            if job is STOP:
                return
            if not self._begin(job):
                continue
            started = clock()
            traced = tracing.current()
            if traced is None:
                outcome = execute(handler, job, limit, policy)
            else:
                outcome = self._traced(traced, job)
            job.ran_s = clock() - started
            observe(job.ran_s)
            self._finish(outcome)

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
        if job.deadline - time.monotonic() >= 0.75 * self.lease_ms / 1000:
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
        """Pass an outcome to the settler, unless a stop already handed its job back."""
        with self.held.lock:
            if outcome.job.finished:
                log.info("job %s finished after it was handed back; outcome dropped",
                         outcome.job.id)
                return
            outcome.job.done = True
            self.finish(outcome)
