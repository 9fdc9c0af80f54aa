"""The beat: renew what the Consumer holds in ONE round trip, then run the recovery leg.

Every ``beat_ms`` the beat renews the leases of buffered jobs (and, with
``auto_extend``, of running ones) before any sweep could collect them, then runs
the recovery chosen at start: ``reap`` (every lapsed lease back once) or the
count-thresholded ``stalled`` sweep. A buffered job whose lease is gone is let go
of unrun; a running one has its cancel token set.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import redis

from echomq.errors import EchoMQError
from echomq.jobs.lease import reap
from echomq.jobs.stalled import sweep_stalled
from echomq.queue.connection import Connection
from echomq.queue.transitions import leases
from echomq.queue.transitions.leases import LEASE_LOST
from echomq.worker.context import JobContext
from echomq.worker.flow_acks import FlowAcks
from echomq.worker.heartbeat import Heartbeat
from echomq.worker.held import Held
from echomq.worker.queues import QueuePlan

log = logging.getLogger("echomq.consumer")

Recovery = Literal["reap", "stalled"]


class Beat:
    """Lease renewal and recovery for one Consumer, on its own thread."""

    def __init__(
        self, conn: Connection, plan: QueuePlan, held: Held, *, lease_ms: int,
        auto_extend: bool, recovery: Recovery, max_stalled: int,
        heartbeat: Heartbeat | None = None, first_after: threading.Event | None = None,
    ) -> None:
        self.conn = conn
        self.plan = plan
        self.held = held
        self.lease_ms = lease_ms
        self.auto_extend = auto_extend
        self.recovery: Recovery = recovery
        self.max_stalled = max_stalled
        self.heartbeat = heartbeat
        """The worker's record, written in the renewal's round trip (None: not written)."""
        self.flow_acks = FlowAcks(conn, plan.names)
        """Outboxes of flow outcomes owed to other queues, drained each beat (fallback)."""
        self.first_after = first_after
        """The first beat waits for it (the claim loop's first answer), at most one beat:
        at a start, its record and its sweep (each a script the server may have to load
        first) held the first claim's answer back 5 - 10 ms."""
        self.thread: threading.Thread | None = None
        """The thread that runs :meth:`run` (a stop joins it before the record goes)."""

    def start(self, guarded: Callable[[Callable[[], None]], None], stop: threading.Event,
              beat_ms: int) -> None:
        """Run :meth:`run` on a thread of its own (:attr:`thread`), through ``guarded``."""
        self.thread = threading.Thread(target=guarded, name="emq-beat", daemon=True,
                                       args=(lambda: self.run(stop, beat_ms),))
        self.thread.start()

    def run(self, stop: threading.Event, beat_ms: int) -> None:
        """Beat until ``stop`` (the first after :attr:`first_after`); a server that fails
        one beat is tried again on the next."""
        if self.first_after is not None:
            self.first_after.wait(beat_ms / 1000)
            if stop.is_set():
                return
        while True:
            try:
                self.beat()
            except (EchoMQError, redis.RedisError) as exc:  # the server, not us: next beat
                log.warning("beat failed: %s", exc)
            if stop.wait(beat_ms / 1000):
                return

    def beat(self) -> None:
        """One beat: renew, then recover each queue."""
        self.renew_held()
        for queue in self.plan.names:
            if self.recovery == "stalled":
                sweep = sweep_stalled(self.conn, queue, self.max_stalled)
                if sweep.recovered or sweep.dead:
                    log.info("stalled sweep of %r: recovered %s, dead-lettered %s",
                             queue, sweep.recovered, sweep.dead)
            else:
                back = reap(self.conn, queue)
                if back:
                    log.info("reaped %d lapsed lease(s) of %r: %s", len(back), queue,
                             json.dumps(back))
        self.flow_acks.sweep()

    def renew_held(self) -> None:
        """Renew every buffered lease (and, with ``auto_extend``, every running one) in
        ONE round trip, before the sweep could collect one. A buffered job whose lease
        is gone is dropped unrun; a running one has its cancel token set. The worker's
        heartbeat record rides in the same round trip (alone when nothing is renewed)."""
        with self.held.lock:
            held = self.held.unfinished(started_too=True)
            # a running job with a timeout is bounded by it: its lease is kept like a
            # buffered one's, so a long run is never swept and run twice
            jobs = [j for j in held
                    if not j.started or self.auto_extend or j.timeout_s is not None]
            record = self.heartbeat
            if not jobs and record is None:
                return
            sent = time.monotonic()
            keys = self.plan.by_name
            calls = [leases.extend_call(keys[j.queue], j.id, j.token, self.lease_ms)
                     for j in jobs]
            if record is not None:
                calls.append(record.call([(j.queue, j.id, j.token) for j in held]))
            replies = self.conn.executor.run_many(calls)
            if record is not None:
                record.wrote(replies.pop())
            lost = [j for j, reply in zip(jobs, replies, strict=True)
                    if not self._renewed(j, reply, sent)]
            for job in lost:
                if job.started:
                    job.signal_cancel("lease lost")
                else:
                    self.held.let_go(job)
        if lost:
            log.warning("%d held job(s) lost their lease: %s", len(lost),
                        json.dumps([j.id for j in lost]))

    def _renewed(self, job: JobContext, reply: Any, sent: float) -> bool:
        """Record one renewal's answer; False when the lease is no longer ours."""
        error = leases.extended(reply, job.id)
        if isinstance(error, LEASE_LOST):
            return False
        if error is not None:
            log.warning("job %s: lease renewal failed (%s)", job.id, error)
        else:
            job.deadline = sent + self.lease_ms / 1000
        return True
