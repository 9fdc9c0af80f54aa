"""The Consumer: a worker that claims in batches, runs handlers on threads and
settles in batches, with cooperative cancel, checkpoints, recovery and recording,
over one queue or several (strict priority or weighted shares: ``queues.py``).

The claim loop takes a batch (ONE round trip) whenever enough slots are free;
handlers run on ``concurrency`` threads; the settler settles what they finish,
many jobs per round trip, beside the claim loop. A pub/sub subscription wakes the loop
when jobs arrive on an empty queue and forwards cancel events to the running
job's token. A beat thread renews the leases of buffered jobs (and, with
``auto_extend``, of running ones) in one round trip, then runs the recovery leg
chosen at start.

Every lease the Consumer holds is its own to keep: a buffered job is renewed on
the beat and, if it still sat in the buffer for over a quarter of its lease, once
more as it starts, so its handler gets most of a lease however deep the buffer
was. A job whose renewal answers that the lease is gone is not run. Any
exception that would end one of its threads takes the Consumer down: ``run()``
hands back what it holds and raises ``ConsumerCrashed``.
"""

from __future__ import annotations

import logging
import queue as stdlib_queue
import threading
from collections.abc import Callable
from typing import Any, Literal

from echomq.errors import ConsumerCrashed
from echomq.jobs.settle import DEFAULT_BACKOFF_CAP_MS, DEFAULT_BACKOFF_MS, KEEP_ALL
from echomq.jobs.stalled import DEFAULT_MAX_STALLED
from echomq.jobs.texts import DEFAULT_RESULT_LIMIT
from echomq.queue.claim import DEFAULT_LEASE_MS
from echomq.queue.connection import Connection
from echomq.worker import lifecycle
from echomq.worker.beat import Beat, Recovery
from echomq.worker.claim_loop import ClaimLoop
from echomq.worker.context import FailurePolicy, JobContext
from echomq.worker.heartbeat import heartbeat_of
from echomq.worker.held import STOP, Held
from echomq.worker.options import (
    DEFAULT_DURABLE_TIMEOUT_MS,
    ConsumerOptions,
    Handler,
    check_options,
)
from echomq.worker.queues import QueuePlan, QueueSpec
from echomq.worker.settler import Settler
from echomq.worker.slots import HandlerSlots, Timeouts
from echomq.worker.subscription import Subscription

log = logging.getLogger("echomq.consumer")



CLAIMS_STOP_S = 5.0
"""How long an exit past a timeout waits for a claim in flight to land (and be handed back)."""


class Consumer:
    """Process one queue (or several: ``queue`` as ``["a", "b"]`` for strict priority,
    ``"a:5,b:1"`` for weighted shares) until ``stop()``, SIGTERM or SIGINT.

    ``durable_replicas=1`` (durable settles): every settle round trip ends with
    ``WAIT 1 durable_timeout_ms`` on the connection that carried it, so a settle counts
    (``processed``, ``on_settled``) once a replica has it too; a replica that does not
    answer in time is logged and counted (``durable_shortfalls``), never waited on
    for ever. ``on_settled(job, kind)`` is called on the settler thread for each
    settle the server acknowledged (after the WAIT in durable mode); it must be quick,
    and an exception from it takes the Consumer down. ``on_held(jobs)`` and
    ``on_released(jobs)`` (default None, at no cost) are told of each batch of jobs as it
    comes into this Consumer's hands and of each job as it leaves them (settled, lost or
    handed back): a process supervisor settles what a dead child held (``echomq.app``).
    """

    def __init__(
        self,
        conn: Connection,
        queue: QueueSpec,
        handler: Handler,
        *,
        concurrency: int = 8,
        lease_ms: int = DEFAULT_LEASE_MS,
        cancel: bool = False,
        record: bool = False,
        recovery: Recovery = "reap",
        max_stalled: int = DEFAULT_MAX_STALLED,
        beat_ms: int | None = None,
        batch_size: int = 100,
        prefetch: int | None = None,
        poll_ms: int = 1_000,
        auto_extend: bool = False,
        shutdown_grace_ms: int = 30_000,
        keep_completed: int = KEEP_ALL,
        backoff_ms: int = DEFAULT_BACKOFF_MS,
        backoff_cap_ms: int = DEFAULT_BACKOFF_CAP_MS,
        result_limit: int = DEFAULT_RESULT_LIMIT,
        durable_replicas: int = 0,
        durable_timeout_ms: int = DEFAULT_DURABLE_TIMEOUT_MS,
        on_settled: Callable[[JobContext, str], None] | None = None,
        failure_policy: FailurePolicy | None = None,
        log_finished: bool = False,
        timeout_s: float | None = None,
        timeout_grace_s: float = 5.0,
        timeouts: Timeouts | None = None,
        hard_timeout: Literal["abandon", "exit"] = "abandon",
        max_abandoned: int = 4,
        threads: int | None = None,
        on_held: Callable[[list[JobContext]], None] | None = None,
        on_released: Callable[[list[JobContext]], None] | None = None,
        heartbeat: bool = True,
    ) -> None:
        self.conn = conn
        self.plan = QueuePlan(conn, queue)
        self.queues = self.plan.names
        self.queue = self.queues[0]
        """The first (or only) queue served."""
        o = self.options = check_options(
            handler, failure_policy=failure_policy, concurrency=concurrency, threads=threads,
            lease_ms=lease_ms, recovery=recovery, max_stalled=max_stalled, beat_ms=beat_ms,
            batch_size=batch_size, prefetch=prefetch, poll_ms=poll_ms,
            shutdown_grace_ms=shutdown_grace_ms, keep_completed=keep_completed,
            result_limit=result_limit, durable_replicas=durable_replicas,
            durable_timeout_ms=durable_timeout_ms, on_settled=on_settled, on_held=on_held,
            on_released=on_released, timeout_s=timeout_s, timeout_grace_s=timeout_grace_s,
            timeouts=timeouts, hard_timeout=hard_timeout, max_abandoned=max_abandoned,
            backoff_ms=backoff_ms, backoff_cap_ms=backoff_cap_ms, cancel=cancel, record=record,
            auto_extend=auto_extend, log_finished=log_finished)
        self.handler = o.handler
        self.concurrency, self.threads, self.lease_ms = o.concurrency, o.threads, o.lease_ms
        self.record, self.grace_s = record, o.grace_s
        self._stop = threading.Event()
        self._force = threading.Event()
        self._threads: list[threading.Thread] = []
        self._crashed: ConsumerCrashed | None = None
        self._where = lifecycle.described(self.plan)
        self.heartbeat = heartbeat_of(heartbeat, conn, self.queues, o.concurrency, o.beat_ms)
        self._assemble(o)

    def _assemble(self, o: ConsumerOptions) -> None:
        """Build the parts that share the ``Held`` ledger: claim loop, handler slots,
        settler, beat and the subscription that wakes the claim loop."""
        self._held = Held(self.conn, on_held=o.on_held, on_released=o.on_released)
        self._work: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
        self._claims = ClaimLoop(
            self.conn, self.plan, self._held, self._work, concurrency=o.concurrency,
            lease_ms=o.lease_ms, batch_size=o.batch_size, prefetch=o.prefetch,
            poll_s=o.poll_s)
        self._settler = Settler(
            self.conn, self.plan, record=self.record, keep_completed=o.keep_completed,
            backoff_ms=o.backoff_ms, backoff_cap_ms=o.backoff_cap_ms, held=self._held,
            on_crash=self._crash, durable_replicas=o.durable_replicas,
            durable_timeout_ms=o.durable_timeout_ms, on_settled=o.on_settled,
            log_finished=o.log_finished)
        self._slots = HandlerSlots(
            self.conn, o.handler, self._held, self._work, lease_ms=o.lease_ms,
            result_limit=o.result_limit, policy=o.failure_policy,
            observe=self._claims.observe, finish=self._settler.inbox.put, rules=o.rules,
            spawn=self._start_slot, give_up=self._give_up)
        self._beat = Beat(self.conn, self.plan, self._held, lease_ms=o.lease_ms,
                          auto_extend=o.auto_extend, recovery=o.recovery,
                          max_stalled=o.max_stalled, heartbeat=self.heartbeat,
                          first_after=self._claims.answered)
        self._subscription = Subscription(self.conn, self.plan, self._held, self._claims.added,
                                          cancel=o.cancel)

    @property
    def timeouts(self) -> int:
        """Runs that reached their timeout (their token fired with ``timeout``)."""
        watchdog = self._slots.watchdog
        return watchdog.timeouts if watchdog is not None else 0

    @property
    def abandoned(self) -> int:
        """Runs settled as failed at their timeout plus grace without their thread."""
        return self._slots.abandoned_total

    @property
    def processed(self) -> int:
        """Jobs this Consumer settled as completed or cancelled (never a dead-letter, nor
        a result the server refused because the lease was already gone)."""
        return self._settler.completed

    @property
    def failed(self) -> int:
        """Failed attempts (the handler raised) this Consumer settled: :attr:`retried`
        plus :attr:`dead`."""
        return self._settler.failed

    @property
    def retried(self) -> int:
        """Failed attempts this Consumer settled with another try scheduled."""
        return self._settler.retried

    @property
    def dead(self) -> int:
        """Jobs this Consumer dead-lettered (failed on their last try, or for good)."""
        return self._settler.dead

    @property
    def durable_shortfalls(self) -> int:
        """Settles (jobs, with ``durable_replicas`` set) whose round trip's ``WAIT`` saw
        fewer replicas acknowledge than asked within ``durable_timeout_ms``: settles a
        failover could still lose. Each such round trip is also logged at WARNING."""
        return self._settler.durable_shortfalls

    # -- public -------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> None:
        """Work until stopped; then hand back what is unfinished and return.

        Raises ``ConsumerCrashed`` (after the hand-back) when one of its threads met
        an exception it could not handle.
        """
        restore = lifecycle.install_signals(self.stop, self._stop) if install_signals else None
        self._start()
        try:
            self._claims.run(self._stop)
        except Exception as exc:
            log.error("claim loop on %s died: %r", self._where, exc, exc_info=exc)
            raise
        finally:
            try:
                self._shutdown()
            finally:
                if restore:
                    restore()
        if self._crashed is not None:
            raise self._crashed

    def stop(self) -> None:
        """Stop claiming; running handlers get the grace period. A second call forces."""
        if self._stop.is_set():
            self._force.set()
        self._stop.set()
        self._claims.wake.set()
        with self._held.slots:
            self._held.slots.notify_all()

    # -- start and stop ---------------------------------------------------------

    def _start(self) -> None:
        lifecycle.wait_for_server(self.conn, self.queues, self.record, self._stop)
        self._settler.start()
        for _ in range(min(self.threads, self.concurrency)):
            self._start_slot()
        watchdog = self._slots.watchdog
        if watchdog is not None:
            threading.Thread(target=self._guarded, name="emq-watchdog", daemon=True,
                             args=(lambda: watchdog.run(self._stop),)).start()
        self._subscription.start()
        self._beat.start(self._guarded, self._stop, self.options.beat_ms)
        log.info("consumer on %s at %s: concurrency %d, lease %d ms, recovery %s, executor %s",
                 self._where, self.conn.safe_url, self.concurrency, self.lease_ms,
                 self.options.recovery, self.conn.executor_name)

    def _start_slot(self) -> None:
        """One more handler thread (at start, and for each abandoned one)."""
        t = threading.Thread(target=self._guarded, args=(self._slots.run,),
                             name=f"emq-handler-{len(self._threads)}", daemon=True)
        t.start()
        self._threads.append(t)

    def _give_up(self, reason: str) -> None:
        """Too many stuck threads: stop gracefully, and ``run()`` raises. ``exit`` (a run
        past its timeout in a process of its own): settle it, hand back what is buffered
        and end the process at once; the supervisor replaces it."""
        if reason != "exit":
            log.error("consumer on %s: %s", self._where, reason)
            if self._crashed is None:
                self._crashed = ConsumerCrashed(reason)
            self.stop()
            return
        self.stop()  # no new claim: what the claim loop holds when it ends is handed back
        self._claims.stopped.wait(CLAIMS_STOP_S)
        lifecycle.exit_after_timeout(self._settler, self._held, self._work, self._where)

    def _crash(self, thread: str, exc: BaseException) -> None:
        """A thread met an exception it cannot handle: say so at ERROR and stop now."""
        log.error("thread %s of the consumer on %s died: %r; stopping", thread,
                  self._where, exc, exc_info=exc)
        if self._crashed is None:
            self._crashed = ConsumerCrashed(f"{thread} died: {type(exc).__name__}: {exc}")
            self._crashed.__cause__ = exc
        self.stop()
        self.stop()

    def _guarded(self, target: Callable[[], None]) -> None:
        """Run a thread's loop; an exception escaping it takes the Consumer down."""
        try:
            target()
        except Exception as exc:  # noqa: BLE001 - reported, and the Consumer goes down
            self._crash(threading.current_thread().name, exc)

    def _shutdown(self) -> None:
        """Settle and hand back what it holds (``lifecycle.settle_and_hand_back``), then
        end its threads and its subscription."""
        lifecycle.settle_and_hand_back(self._held, self._work, self._settler, self.grace_s,
                                       self._force)
        lifecycle.leave(self.heartbeat, self._stop, self._beat.thread)
        for _ in self._threads:
            self._work.put(STOP)
        self._subscription.stop()
        self._slots.stop()
        if self._slots.watchdog is not None:
            self._slots.watchdog.stop()
        lifecycle.log_stopped(self._where, self._settler)
