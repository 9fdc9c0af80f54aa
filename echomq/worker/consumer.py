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
import os
import queue as stdlib_queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import redis

from echomq.errors import ConnectionFailed, ConsumerCrashed, InvalidArgument
from echomq.jobs.settle import DEFAULT_BACKOFF_CAP_MS, DEFAULT_BACKOFF_MS, KEEP_ALL
from echomq.jobs.stalled import DEFAULT_MAX_STALLED
from echomq.jobs.texts import DEFAULT_RESULT_LIMIT
from echomq.queue import validate
from echomq.queue.claim import DEFAULT_LEASE_MS, MAX_CLAIM
from echomq.queue.connection import Connection
from echomq.worker.beat import Beat, Recovery
from echomq.worker.claim_loop import ClaimLoop
from echomq.worker.context import FailurePolicy, JobContext
from echomq.worker.held import STOP, Held, take_unstarted
from echomq.worker.queues import QueuePlan, QueueSpec
from echomq.worker.settler import Settler
from echomq.worker.slots import HandlerSlots, TimeoutRules, Timeouts
from echomq.worker.subscription import Subscription

log = logging.getLogger("echomq.consumer")

Handler = Callable[[JobContext], Any]
DEFAULT_DURABLE_TIMEOUT_MS = 1_000
MAX_DURABLE_REPLICAS = 16
SETTLE_FLUSH_S = 5.0
"""How long a stop waits for finished outcomes to settle before handing anything back."""
TIMEOUT_EXIT_CODE = 75
"""A process's exit status after ``hard_timeout="exit"`` ended it (its supervisor replaces it)."""


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
    ) -> None:
        self.conn = conn
        self.plan = QueuePlan(conn, queue)
        self.queues = self.plan.names
        self.queue = self.queues[0]
        """The first (or only) queue served."""
        if not callable(handler):
            raise InvalidArgument(f"handler must be callable, got {handler!r}")
        self.handler = handler
        if failure_policy is not None and not callable(failure_policy):
            raise InvalidArgument("failure_policy must be callable")
        self.failure_policy = failure_policy
        self.log_finished = log_finished
        self.concurrency = validate.positive_int(concurrency, "concurrency")
        self.threads = self.concurrency if threads is None else validate.positive_int(
            threads, "threads")
        """Handler threads: ``concurrency`` by default; fewer when handlers are coroutines
        (async tasks run on one event loop, and a thread only hands them over)."""
        self.lease_ms = validate.positive_int(lease_ms, "lease_ms")
        if recovery not in ("reap", "stalled"):
            raise InvalidArgument(f"recovery must be 'reap' or 'stalled', got {recovery!r}")
        self.recovery: Recovery = recovery
        self.max_stalled = validate.positive_int(max_stalled, "max_stalled")
        self.beat_ms = validate.positive_int(
            beat_ms if beat_ms is not None else max(50, lease_ms // 2), "beat_ms"
        )
        self.batch_size = validate.positive_int(batch_size, "batch_size")
        if self.batch_size > MAX_CLAIM:
            raise InvalidArgument(f"batch_size must be at most {MAX_CLAIM}")
        self.prefetch = None if prefetch is None else validate.non_negative_int(
            prefetch, "prefetch")
        self.poll_s = validate.positive_int(poll_ms, "poll_ms") / 1000
        self.grace_s = validate.non_negative_int(shutdown_grace_ms, "shutdown_grace_ms") / 1000
        validate.keep_count(keep_completed, "keep_completed")
        self.result_limit = validate.positive_int(result_limit, "result_limit")
        self.cancel = cancel
        self.record = record
        self.auto_extend = auto_extend
        self.durable_replicas = validate.non_negative_int(durable_replicas, "durable_replicas")
        if self.durable_replicas > MAX_DURABLE_REPLICAS:
            raise InvalidArgument(f"durable_replicas must be at most {MAX_DURABLE_REPLICAS}")
        self.durable_timeout_ms = validate.positive_int(durable_timeout_ms,
                                                        "durable_timeout_ms")
        if on_settled is not None and not callable(on_settled):
            raise InvalidArgument("on_settled must be callable")
        self.on_settled = on_settled
        for hook, what in ((on_held, "on_held"), (on_released, "on_released")):
            if hook is not None and not callable(hook):
                raise InvalidArgument(f"{what} must be callable")
        self.on_held = on_held
        self.on_released = on_released

        self._rules = self._timeout_rules(timeout_s, timeout_grace_s, timeouts, hard_timeout,
                                          max_abandoned)
        self._assemble(keep_completed, validate.positive_int(backoff_ms, "backoff_ms"),
                       validate.positive_int(backoff_cap_ms, "backoff_cap_ms"))
        self._stop = threading.Event()
        self._force = threading.Event()
        self._threads: list[threading.Thread] = []
        self._crashed: ConsumerCrashed | None = None

    def _assemble(self, keep_completed: int, backoff_ms: int, backoff_cap_ms: int) -> None:
        """Build the parts that share the ``Held`` ledger: claim loop, handler slots,
        settler, beat and the subscription that wakes the claim loop."""
        self._held = Held(self.conn, on_held=self.on_held, on_released=self.on_released)
        self._work: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
        self._claims = ClaimLoop(
            self.conn, self.plan, self._held, self._work, concurrency=self.concurrency,
            lease_ms=self.lease_ms, batch_size=self.batch_size, prefetch=self.prefetch,
            poll_s=self.poll_s)
        self._settler = Settler(
            self.conn, self.plan, record=self.record, keep_completed=keep_completed,
            backoff_ms=backoff_ms, backoff_cap_ms=backoff_cap_ms, held=self._held,
            on_crash=self._crash, durable_replicas=self.durable_replicas,
            durable_timeout_ms=self.durable_timeout_ms, on_settled=self.on_settled,
            log_finished=self.log_finished)
        self._slots = HandlerSlots(
            self.conn, self.handler, self._held, self._work, lease_ms=self.lease_ms,
            result_limit=self.result_limit, policy=self.failure_policy,
            observe=self._claims.observe, finish=self._settler.inbox.put, rules=self._rules,
            spawn=self._start_slot, give_up=self._give_up)
        self._beat = Beat(self.conn, self.plan, self._held, lease_ms=self.lease_ms,
                          auto_extend=self.auto_extend, recovery=self.recovery,
                          max_stalled=self.max_stalled)
        self._subscription = Subscription(self.conn, self.plan, self._held, self._claims.added,
                                          cancel=self.cancel)

    def _timeout_rules(self, timeout_s: float | None, grace_s: float,
                       timeouts: Timeouts | None, hard: str, max_abandoned: int
                       ) -> TimeoutRules | None:
        """The timeouts: per job (``timeouts``, an App's tasks) or one for every job."""
        if hard not in ("abandon", "exit"):
            raise InvalidArgument(f"hard_timeout must be 'abandon' or 'exit', got {hard!r}")
        validate.positive_int(max_abandoned, "max_abandoned")
        if timeouts is None and timeout_s is None:
            return None
        if timeout_s is not None:
            limits = check_timeout(timeout_s, grace_s, self.lease_ms)
            timeouts = timeouts or (lambda job: limits)
        if not callable(timeouts):
            raise InvalidArgument("timeouts must be callable")
        return TimeoutRules(timeouts, hard, max_abandoned)

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
        restore = self._install_signals() if install_signals else None
        self._start()
        try:
            self._claims.run(self._stop)
        except Exception as exc:
            log.error("claim loop on %s died: %r", self._described(), exc, exc_info=exc)
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

    def _install_signals(self) -> Callable[[], None] | None:
        if threading.current_thread() is not threading.main_thread():
            return None

        def on_signal(signum: int, _frame: object) -> None:
            log.info("signal %s: %s", signal.Signals(signum).name,
                     "exiting now" if self._stop.is_set() else "finishing running jobs")
            self.stop()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for signum, old in previous.items():
                signal.signal(signum, old)

        return restore

    def _start(self) -> None:
        self._wait_for_server()
        self._settler.start()
        for _ in range(min(self.threads, self.concurrency)):
            self._start_slot()
        watchdog = self._slots.watchdog
        if watchdog is not None:
            threading.Thread(target=self._guarded, name="emq-watchdog", daemon=True,
                             args=(lambda: watchdog.run(self._stop),)).start()
        self._subscription.start()
        beat = threading.Thread(target=self._guarded, name="emq-beat", daemon=True,
                                args=(lambda: self._beat.run(self._stop, self.beat_ms),))
        beat.start()
        log.info("consumer on %s at %s: concurrency %d, lease %d ms, recovery %s, executor %s",
                 self._described(), self.conn.safe_url, self.concurrency, self.lease_ms,
                 self.recovery, self.conn.executor_name)

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
            log.error("consumer on %s: %s", self._described(), reason)
            if self._crashed is None:
                self._crashed = ConsumerCrashed(reason)
            self.stop()
            return
        self._settler.flush(SETTLE_FLUSH_S)
        self._held.hand_back(take_unstarted(self._work))
        log.error("consumer on %s: a run outlived its timeout plus grace; exiting (%d)",
                  self._described(), TIMEOUT_EXIT_CODE)
        logging.shutdown()
        os._exit(TIMEOUT_EXIT_CODE)

    def _described(self) -> str:
        """The queues for log lines: ``'mail'``, or ``queues high, mail`` (``high:5, ...``)."""
        if len(self.queues) == 1:
            return repr(self.queue)
        return f"queues {self.plan.describe()}"

    def _wait_for_server(self) -> None:
        """Declare the stream (or just reach the server), riding out a server that is
        restarting or loading its data, as the claim loop does, until ``stop()``."""
        failures = 0
        while not self._stop.is_set():
            try:
                if self.record:
                    from echomq.queue.declared import declare

                    for queue in self.queues:
                        declare(self.conn, queue)
                else:
                    self.conn.redis.ping()
                return
            except (ConnectionFailed, redis.ConnectionError, redis.TimeoutError) as exc:
                failures += 1
                delay = min(5.0, 0.1 * 2**failures)
                log.warning("server not ready (%s); retrying in %.1fs", exc, delay)
                self._stop.wait(delay)

    def _crash(self, thread: str, exc: BaseException) -> None:
        """A thread met an exception it cannot handle: say so at ERROR and stop now."""
        log.error("thread %s of the consumer on %s died: %r; stopping", thread,
                  self._described(), exc, exc_info=exc)
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
        """Hand back unstarted jobs at once, give running ones the grace period, settle
        every finished outcome, then hand back the unfinished rest so another worker
        can take them without waiting. A job whose handler finished is never handed
        back: its outcome settles (or, with the server gone, its lease lapses)."""
        self._held.hand_back(take_unstarted(self._work))
        self._held.wait_drained(time.monotonic() + self.grace_s, self._force)
        if not self._settler.flush(SETTLE_FLUSH_S):
            log.warning("finished outcomes still settling after %.0fs", SETTLE_FLUSH_S)
        # a dead settler will never settle what finished: hand those back too
        self._held.hand_back(self._held.take_unfinished(finished_too=not self._settler.alive))
        self._settler.stop(give_up=True)
        for _ in self._threads:
            self._work.put(STOP)
        self._subscription.stop()
        self._slots.stop()
        if self._slots.watchdog is not None:
            self._slots.watchdog.stop()
        s = self._settler
        log.info("consumer on %s stopped: %d completed, %d cancelled, %d failed "
                 "(%d retried, %d dead)", self._described(), s.completed - s.cancelled,
                 s.cancelled, s.failed, s.retried, s.dead)


def check_timeout(timeout_s: float, grace_s: float, lease_ms: int) -> tuple[float, float]:
    """``(timeout_s, grace_s)`` if both are usable with this lease; else a clear error.
    The grace must be shorter than the lease: a run that outlives it is settled by the
    watchdog, before its lease could lapse and another worker run it again."""
    for value, what in ((timeout_s, "timeout_s"), (grace_s, "timeout_grace_s")):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidArgument(f"{what} must be a number of seconds, got {value!r}")
    if not timeout_s > 0:
        raise InvalidArgument(f"timeout_s must be above 0, got {timeout_s}")
    if not 0 <= grace_s < lease_ms / 1000:
        raise InvalidArgument(f"timeout_grace_s must be at least 0 and below the lease "
                              f"({lease_ms / 1000:g} s), got {grace_s}")
    return float(timeout_s), float(grace_s)
