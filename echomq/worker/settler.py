"""The settler: turns finished handler runs into settle calls, many per round trip.

Handlers drop their ``HandlerOutcome`` in the settler's inbox and go back to work; the
settler thread drains the inbox and sends one ``complete`` call for every
completion and cancellation plus one ``fail`` call per failure, all in ONE
pipeline. It runs beside the claim loop, so claiming and settling overlap.
A server that does not answer (lost, timed out) is retried with backoff; any
other exception ends the thread through ``on_crash``, never silently. A settled
job is let go of through the Consumer's ``Held`` ledger. The calls a batch becomes are
built in ``settle_calls.py``. In durable mode
(``durable_replicas``) each round trip ends with ``WAIT`` on its own connection and a
replica that does not acknowledge in time is logged and counted, never waited on for ever.
"""

from __future__ import annotations

import logging
import queue as stdlib_queue
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from echomq import tracing
from echomq.errors import ConnectionFailed
from echomq.queue.connection import Connection
from echomq.queue.executors import Call
from echomq.queue.transitions import rates, settles
from echomq.worker.context import HandlerOutcome, JobContext
from echomq.worker.flow_acks import FlowAcks
from echomq.worker.held import STOP, Held
from echomq.worker.queues import QueuePlan
from echomq.worker.settle_calls import by_queue, complete_groups, limited_calls, settle_calls

log = logging.getLogger("echomq.consumer")
finished_log = logging.getLogger("echomq.worker")
"""One INFO line per finished job (``log_finished``): task, id, queue, attempt, time, outcome."""

MAX_PER_CALL = 1000
"""Settlements per complete call, the limit complete-2.lua documents."""


class Settler:
    """Owns the outcome inbox and the thread that settles it."""

    def __init__(
        self,
        conn: Connection,
        plan: QueuePlan,
        *,
        record: bool,
        keep_completed: int,
        backoff_ms: int,
        backoff_cap_ms: int,
        held: Held,
        on_crash: Callable[[str, BaseException], None],
        durable_replicas: int = 0,
        durable_timeout_ms: int = 0,
        on_settled: Callable[[JobContext, str], None] | None = None,
        log_finished: bool = False,
    ) -> None:
        self.conn = conn
        self.plan = plan
        self.record = record
        self.keep_completed = keep_completed
        self.backoff_ms = backoff_ms
        self.backoff_cap_ms = backoff_cap_ms
        self.held = held
        self.on_crash = on_crash
        self.inbox: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
        self.completed = 0
        """Jobs settled as completed or cancelled (``cancelled`` counts the latter)."""
        self.cancelled = 0
        self.failed = 0
        """Failed attempts (the handler raised) settled: ``retried`` plus ``dead``."""
        self.retried = 0
        self.dead = 0
        self.durable_replicas = durable_replicas
        self.durable_timeout_ms = durable_timeout_ms
        self.on_settled = on_settled
        self.log_finished = log_finished
        self.flow_acks = FlowAcks(conn, plan.names)
        """Flow outcomes owed to parents on other queues, delivered after each round."""
        self.durable_shortfalls = 0
        """Settles (jobs) whose round trip's WAIT saw fewer replicas than asked."""
        self._give_up = threading.Event()
        self._thread = threading.Thread(target=self._run, name="emq-settler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """False once the thread has ended (stopped, or crashed)."""
        return self._thread.is_alive()

    def flush(self, timeout: float) -> bool:
        """Wait until every outcome put so far is settled (or given up); False on timeout."""
        marker = threading.Event()
        self.inbox.put(marker)
        deadline = time.monotonic() + timeout
        while not marker.wait(0.05):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                return False
        return True

    def stop(self, *, give_up: bool = False, timeout: float = 10.0) -> None:
        """Settle what is in the inbox, then end. ``give_up`` stops retrying a lost server."""
        if give_up:
            self._give_up.set()
        self.inbox.put(STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            stopping = False
            while not (stopping and self.inbox.empty()):
                batch, markers, saw_stop = self._take()
                stopping = stopping or saw_stop
                if batch:
                    self._settle(batch)
                    self.flow_acks.after_settle()
                for marker in markers:
                    marker.set()
        except Exception as exc:  # noqa: BLE001 - reported, and the Consumer goes down
            self.on_crash(self._thread.name, exc)

    def _take(self) -> tuple[list[HandlerOutcome], list[threading.Event], bool]:
        """The next batch in arrival order: outcomes, flush markers, and whether the
        stop came. Blocks for the first item only."""
        batch: list[HandlerOutcome] = []
        markers: list[threading.Event] = []
        stopping = False
        item = self.inbox.get()
        while True:
            if item is STOP:
                stopping = True
            elif isinstance(item, threading.Event):
                markers.append(item)
            else:
                batch.append(item)
            if len(batch) >= MAX_PER_CALL:
                break
            try:
                item = self.inbox.get_nowait()
            except stdlib_queue.Empty:
                break
        return batch, markers, stopping

    def _settle(self, batch: list[HandlerOutcome]) -> None:
        """Let go of the runs that lost their lease; settle the rest, in one round trip
        (in durable mode one per queue: ``WAIT`` counts one connection's writes)."""
        for o in batch:
            if o.kind == "lost":
                log.warning("job %s stopped: lease lost (%s)", o.job.id, o.text)
                self.held.let_go(o.job)
        batch = [o for o in batch if o.kind != "lost"]
        if not batch:
            return
        if self.durable_replicas and len(self.plan.names) > 1:
            for outcomes in by_queue(batch):
                self._settle_round_trip(outcomes)
        else:
            self._settle_round_trip(batch)

    def _settle_round_trip(self, batch: list[HandlerOutcome]) -> None:
        """Send the batch; on a lost server, retry with backoff (the leases keep the jobs
        safe meanwhile) until it answers or the Consumer gives up."""
        completes = [o for o in batch if o.kind in ("completed", "cancelled")]
        fails = [o for o in batch if o.kind in ("failed", "rejected")]
        limited = [o for o in batch if o.kind == "limited"]
        groups = complete_groups(completes)
        calls = settle_calls(self.plan, groups, fails, record=self.record,
                             keep_completed=self.keep_completed, backoff_ms=self.backoff_ms,
                             backoff_cap_ms=self.backoff_cap_ms)
        calls += limited_calls(self.plan, limited)
        traced = tracing.current()
        spans = [] if traced is None else [
            traced.settle(o.job.queue, o.job.id, o.job.span) for o in batch]
        self.held.settling_now(len(batch))
        try:
            replies = self._send_until_answered(calls, len(batch))
        finally:
            self.held.settling_now(0)  # before any let-go: never more room than slots
        for span in spans:
            span.end()
        if replies is None:
            for o in batch:
                self.held.let_go(o.job)
            return
        if limited:
            self._account_limited(limited, replies[len(replies) - len(limited):])
            replies = replies[:len(replies) - len(limited)]
        self._account(groups, fails, replies)

    def _send_until_answered(self, calls: list[Call], jobs: int) -> list[Any] | None:
        """The replies of one round trip, sent again with backoff while the server is
        lost or times out; None once the Consumer gives up (it is stopping)."""
        delay = 0.1
        while True:
            try:
                return self._send(calls, jobs)
            except (ConnectionFailed, redis.TimeoutError) as exc:  # lost, or timed out
                if self._give_up.is_set():
                    log.warning("could not settle %d job(s): %s", jobs, exc)
                    return None
                log.warning("server unreachable while settling (%s); retrying in %.1fs",
                            exc, delay)
                self._give_up.wait(delay)
                delay = min(5.0, delay * 2)

    def _send(self, calls: list[Call], jobs: int) -> list[Any]:
        """One round trip; in durable mode with ``WAIT`` after the settles, and a
        shortfall (fewer replicas acknowledged than asked) logged and counted."""
        if not self.durable_replicas:
            return self.conn.executor.run_many(calls)
        replies, acked = self.conn.executor.run_many_waiting(
            calls, self.durable_replicas, self.durable_timeout_ms)
        if acked < self.durable_replicas:
            self.durable_shortfalls += jobs
            log.warning("settled %d job(s) but %d of %d replica(s) acknowledged within "
                        "%d ms: a failover now could lose them", jobs, acked,
                        self.durable_replicas, self.durable_timeout_ms)
        return replies

    def _account(self, groups: list[tuple[str, list[HandlerOutcome]]],
                 fails: list[HandlerOutcome], replies: list[Any]) -> None:
        for _, outcomes in groups:
            self._account_completes(outcomes, replies.pop(0))
        for o, reply in zip(fails, replies, strict=True):
            verdict = settles.failed(reply, o.job.id)
            if isinstance(verdict, BaseException):
                log.warning("job %s failed after its lease was lost: %s", o.job.id, verdict)
            else:
                if self.log_finished:
                    self._log_finished(o.job, verdict, o.text.splitlines()[0])
                else:
                    log.info("job %s failed (%s): %s", o.job.id, verdict,
                             o.text.splitlines()[0])
                self.failed += 1
                if verdict == "dead":
                    self.dead += 1
                else:
                    self.retried += 1
                if self.on_settled is not None:
                    self.on_settled(o.job, o.kind)
            self.held.let_go(o.job)

    def _account_limited(self, limited: list[HandlerOutcome], replies: list[Any]) -> None:
        """Runs that raised ``RateLimited``: handed back (or lost with their lease)."""
        for o, reply in zip(limited, replies, strict=True):
            try:
                who = rates.rate_waited(reply, o.job.id)
                log.info("job %s handed back: %s (its %s waits)", o.job.id, o.text, who)
            except Exception as exc:  # noqa: BLE001 - a lost lease: another holder settles
                log.warning("job %s rate limited after its lease was lost: %s", o.job.id, exc)
            self.held.let_go(o.job)

    def _account_completes(self, completes: list[HandlerOutcome], reply: Any) -> None:
        if isinstance(reply, Exception):
            log.error("complete failed for %d job(s): %s", len(completes), reply)
            errors: list[Any] = [reply] * len(completes)
        else:
            errors = list(settles.completed([o.job.id for o in completes], reply))
        logged = self.log_finished and finished_log.isEnabledFor(logging.INFO)
        if not logged and self.on_settled is None and errors.count(None) == len(completes):
            # every job settled and none to tell one by one: counted at once (~0.2 us a job)
            self.completed += len(completes)
            self.cancelled += [o.kind for o in completes].count("cancelled")
            self.held.let_go_many([o.job for o in completes])
            return
        for o, error in zip(completes, errors, strict=True):
            if error is None:
                if logged:
                    self._log_finished(o.job, o.kind)
                self.completed += 1
                if o.kind == "cancelled":
                    self.cancelled += 1
                if self.on_settled is not None:
                    self.on_settled(o.job, o.kind)
            else:
                log.warning("job %s finished after its lease was lost (%s); "
                            "its result was not recorded", o.job.id, error)
        self.held.let_go_many([o.job for o in completes])

    @staticmethod
    def _log_finished(job: JobContext, outcome: str, error: str = "") -> None:
        finished_log.info("%s %s/%s attempt %d %s in %.3fs%s", job.name or "(no name)",
                          job.queue, job.id, job.attempts, outcome, job.ran_s,
                          f": {error}" if error else "")
