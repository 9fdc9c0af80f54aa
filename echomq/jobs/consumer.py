"""The Consumer: a worker that claims in batches, runs handlers on threads and
settles in batches, with cooperative cancel, checkpoints, recovery and recording.

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
import signal
import threading
import time
from collections.abc import Callable
from time import perf_counter
from typing import Any, Literal

import redis

from echomq.errors import ConnectionFailed, ConsumerCrashed, EchoMQError, InvalidArgument
from echomq.jobs import cancel as cancel_tokens
from echomq.jobs.handler import LEASE_LOST, JobContext, Outcome, execute
from echomq.jobs.lease import extend_call, extend_lock, reap
from echomq.jobs.settle import (
    DEFAULT_BACKOFF_CAP_MS,
    DEFAULT_BACKOFF_MS,
    DEFAULT_RESULT_LIMIT,
    KEEP_ALL,
    release_many,
)
from echomq.jobs.settler import Settler
from echomq.jobs.stalled import DEFAULT_MAX_STALLED, sweep_stalled
from echomq.queue import validate
from echomq.queue.claim import DEFAULT_LEASE_MS, MAX_CLAIM, claim_call
from echomq.queue.connection import Connection
from echomq.queue.events import Event
from echomq.queue.keys import Keys

log = logging.getLogger("echomq.consumer")

Handler = Callable[[JobContext], Any]
Recovery = Literal["reap", "stalled"]
_STOP = object()
_LOST_CODES = (-1, -3)
"""extend_lock codes that mean the lease is no longer this holder's (gone, collected)."""
SETTLE_FLUSH_S = 5.0
"""How long a stop waits for finished outcomes to settle before handing anything back."""


class Consumer:
    """Process one queue until ``stop()``, SIGTERM or SIGINT."""

    def __init__(
        self,
        conn: Connection,
        queue: str,
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
    ) -> None:
        self.conn = conn
        self.keys = Keys(queue)
        self.queue = queue
        self.handler = handler
        self.concurrency = validate.positive_int(concurrency, "concurrency")
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

        self._job_seconds = self.lease_ms / 1000  # a running estimate; pessimistic at first
        self._inflight = 0
        self._slots = threading.Condition()
        self._running: dict[str, JobContext] = {}
        """Every job held, buffered or running, until it leaves this Consumer's hands."""
        self._hold = threading.Lock()
        """Orders a job's start, its finish and a stop's hand-back against each other and
        against the beat's renewal, so a renewal that finds a lease gone lands first."""
        self._work: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
        self._settler = Settler(
            conn, self.keys, record=record, keep_completed=keep_completed,
            backoff_ms=validate.positive_int(backoff_ms, "backoff_ms"),
            backoff_cap_ms=validate.positive_int(backoff_cap_ms, "backoff_cap_ms"),
            forget=self._forget, on_crash=self._crash,
        )
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._force = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pubsub: Any = None
        self._pubsub_thread: Any = None
        self._crashed: ConsumerCrashed | None = None

    @property
    def processed(self) -> int:
        """Jobs this Consumer settled as completed or cancelled (never a dead-letter, nor
        a result the server refused because the lease was already gone)."""
        return self._settler.completed

    @property
    def failed(self) -> int:
        """Handler failures this Consumer settled (retried or dead-lettered)."""
        return self._settler.failed

    # -- public -------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> None:
        """Work until stopped; then hand back what is unfinished and return.

        Raises ``ConsumerCrashed`` (after the hand-back) when one of its threads met
        an exception it could not handle.
        """
        restore = self._install_signals() if install_signals else None
        self._start()
        try:
            self._loop()
        except Exception as exc:
            log.error("claim loop on %r died: %r", self.queue, exc, exc_info=exc)
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
        self._wake.set()
        with self._slots:
            self._slots.notify_all()

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
        for n in range(self.concurrency):
            t = threading.Thread(target=self._guarded, args=(self._work_loop,),
                                 name=f"emq-handler-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        self._subscribe()
        beat = threading.Thread(target=self._guarded, args=(self._beat_loop,), name="emq-beat",
                                daemon=True)
        beat.start()
        log.info("consumer on %r: concurrency %d, lease %d ms, recovery %s, executor %s",
                 self.queue, self.concurrency, self.lease_ms, self.recovery,
                 self.conn.executor_name)

    def _wait_for_server(self) -> None:
        """Declare the stream (or just reach the server), riding out a server that is
        restarting or loading its data, as the claim loop does, until ``stop()``."""
        failures = 0
        while not self._stop.is_set():
            try:
                if self.record:
                    from echomq.queue.declared import declare

                    declare(self.conn, self.queue)
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
        log.error("thread %s of the consumer on %r died: %r; stopping", thread, self.queue, exc,
                  exc_info=exc)
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
        self._release(self._take_unstarted())
        deadline = time.monotonic() + self.grace_s
        with self._slots:
            while self._inflight > 0 and not self._force.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._slots.wait(min(remaining, 0.1))
        if not self._settler.flush(SETTLE_FLUSH_S):
            log.warning("finished outcomes still settling after %.0fs", SETTLE_FLUSH_S)
        # a dead settler will never settle what finished: hand those back too
        self._release(self._take_unfinished(finished_too=not self._settler.alive))
        self._settler.stop(give_up=True)
        for _ in self._threads:
            self._work.put(_STOP)
        if self._pubsub_thread is not None:
            self._pubsub_thread.stop()  # the worker thread closes the pub/sub on its way out
            self._pubsub_thread.join(timeout=2)
        log.info("consumer on %r stopped: %d processed, %d failed",
                 self.queue, self.processed, self.failed)

    def _take_unstarted(self) -> list[JobContext]:
        """Empty the buffer: the jobs no handler thread will start now."""
        unstarted: list[JobContext] = []
        while True:
            try:
                item = self._work.get_nowait()
            except stdlib_queue.Empty:
                return unstarted
            if isinstance(item, JobContext) and not item.finished:
                unstarted.append(item)

    def _take_unfinished(self, *, finished_too: bool = False) -> list[JobContext]:
        """The running jobs whose handlers have not returned (with ``finished_too``, all
        still held), let go of at once, so an outcome that arrives after the hand-back
        is dropped rather than settled."""
        with self._hold:
            jobs = [j for j in list(self._running.values())
                    if not j.finished and (finished_too or not j.done)]
            for job in jobs:
                self._forget(job)
        return jobs

    def _release(self, jobs: list[JobContext]) -> None:
        if not jobs:
            return
        try:
            release_many(self.conn, self.queue, [(job.id, job.token) for job in jobs])
            log.info("handed back %d unfinished job(s)", len(jobs))
        except (EchoMQError, redis.RedisError) as exc:
            log.warning("could not hand back %d job(s); their leases will lapse: %s",
                        len(jobs), exc)
        for job in jobs:
            self._forget(job)

    # -- the claim loop -----------------------------------------------------------

    def _loop(self) -> None:
        """Claim a batch whenever enough slots are free; park while the queue is empty."""
        failures = 0
        while not self._stop.is_set():
            with self._slots:
                limit = self._max_inflight()
                claim_at = max(1, min(self.batch_size, limit) // 2)  # keep claims batched
                while (self._inflight and limit - self._inflight < claim_at
                       and not self._stop.is_set()):
                    self._slots.wait(self.poll_s)
                    limit = self._max_inflight()
                want = min(limit - self._inflight, self.batch_size)
            if self._stop.is_set():
                return
            self._wake.clear()  # an add from here on wakes the idle wait below
            sent = time.monotonic()
            try:
                flat = self.conn.executor.run(*claim_call(self.keys, self.lease_ms, want))
            except (ConnectionFailed, redis.RedisError) as exc:
                failures += 1
                delay = min(5.0, 0.1 * 2**failures)
                log.warning("claim failed (%s); retrying in %.1fs", exc, delay)
                self._stop.wait(delay)
                continue
            failures = 0
            if flat:
                self._dispatch(flat, sent + self.lease_ms / 1000)
            else:
                self._wake.wait(self._idle_wait())

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

    def _observe(self, seconds: float) -> None:
        """Fold one handler run time into the estimate (a moving average)."""
        self._job_seconds += (seconds - self._job_seconds) * 0.2

    def _dispatch(self, flat: list[Any], deadline: float) -> None:
        jobs = [
            JobContext(self.conn, self.queue, flat[i], int(flat[i + 1]), flat[i + 2],
                       self.lease_ms)
            for i in range(1, len(flat), 3)
        ]
        for job in jobs:
            job.deadline = deadline
        with self._slots:
            self._inflight += len(jobs)
        for job in jobs:
            self._running[job.id] = job
            self._work.put(job)

    def _forget(self, job: JobContext) -> None:
        """A job left this Consumer's hands (settled, lost or handed back): free its slot once."""
        with self._slots:
            if job.finished:
                return
            job.finished = True
            self._inflight -= 1
            self._slots.notify_all()
        if self._running.get(job.id) is job:
            self._running.pop(job.id, None)

    def _idle_wait(self) -> float:
        """How long to park with nothing to do: the poll interval, or less when a
        scheduled job falls due sooner (an add wakes us earlier through pub/sub)."""
        try:
            pipe = self.conn.redis.pipeline(transaction=False)
            pipe.zrange(self.keys.scheduled, 0, 0, withscores=True)
            pipe.time()
            first, (secs, micros) = pipe.execute()
        except redis.RedisError:
            return self.poll_s
        if not first:
            return self.poll_s
        due_in = (float(first[0][1]) - (int(secs) * 1000 + int(micros) // 1000)) / 1000
        return max(0.005, min(self.poll_s, due_in))

    # -- threads ----------------------------------------------------------------

    def _work_loop(self) -> None:
        work, handler, clock, limit = self._work, self.handler, perf_counter, self.result_limit
        while True:
            job = work.get()
            if job is _STOP:
                return
            if not self._begin(job):
                continue
            started = clock()
            outcome = execute(handler, job, limit)
            self._observe(clock() - started)
            self._finish(outcome)

    def _begin(self, job: JobContext) -> bool:
        """Take a job from the buffer: False when it is no longer ours to run (its
        lease was found gone, or a stop handed it back). A job that sat in the buffer
        for over a quarter of its lease is renewed first, so its handler gets most
        of a lease however long it waited."""
        with self._hold:  # a renewal of this job in flight lands before it starts
            if job.finished:
                return False
            job.started = True
        if job.deadline - time.monotonic() >= 0.75 * self.lease_ms / 1000:
            return True
        sent = time.monotonic()
        try:
            extend_lock(self.conn, self.queue, job.id, job.token, self.lease_ms)
        except LEASE_LOST as exc:
            log.warning("job %s not started: its lease is gone (%s)", job.id, exc)
            self._forget(job)
            return False
        except (EchoMQError, redis.RedisError) as exc:
            log.warning("job %s: could not renew its lease before starting (%s)", job.id, exc)
            return True
        job.deadline = sent + self.lease_ms / 1000
        return True

    def _finish(self, outcome: Outcome) -> None:
        """Pass an outcome to the settler, unless a stop already handed its job back."""
        with self._hold:
            if outcome.job.finished:
                log.info("job %s finished after it was handed back; outcome dropped",
                         outcome.job.id)
                return
            outcome.job.done = True
            self._settler.inbox.put(outcome)

    def _subscribe(self) -> None:
        def on_message(message: dict[str, Any]) -> None:
            event = Event.decode(message.get("data", ""))
            if event is None:
                return
            if event.event == "added":
                self._wake.set()
            elif event.event == "cancel" and self.cancel and event.job_id:
                job = self._running.get(event.job_id)
                if job is not None:
                    cancel_tokens.cancel(job.cancel_token, event.reason)
                    log.info("job %s: cancel requested (%s)", job.id, event.reason)

        def on_error(exc: BaseException, pubsub: Any, thread: Any) -> None:
            # redis-py's worker thread goes on after this returns: a lost server is
            # reconnected (and resubscribed) on the next read
            log.warning("event subscription failed (%r); going on", exc)
            time.sleep(0.5)

        self._pubsub = self.conn.redis.pubsub(  # type: ignore[no-untyped-call]
            ignore_subscribe_messages=True)
        self._pubsub.subscribe(**{self.keys.events: on_message})
        self._pubsub_thread = self._pubsub.run_in_thread(
            sleep_time=0.5, daemon=True, exception_handler=on_error
        )

    def _beat_loop(self) -> None:
        while True:
            try:
                self._beat()
            except (EchoMQError, redis.RedisError) as exc:  # the server, not us: next beat
                log.warning("beat failed: %s", exc)
            if self._stop.wait(self.beat_ms / 1000):
                return

    def _beat(self) -> None:
        self._renew_held()
        if self.recovery == "stalled":
            sweep = sweep_stalled(self.conn, self.queue, self.max_stalled)
            if sweep.recovered or sweep.dead:
                log.info("stalled sweep: recovered %s, dead-lettered %s",
                         sweep.recovered, sweep.dead)
        else:
            back = reap(self.conn, self.queue)
            if back:
                log.info("reaped %d lapsed lease(s): %s", len(back), back)

    def _renew_held(self) -> None:
        """Renew every buffered lease (and, with ``auto_extend``, every running one) in
        ONE round trip, before the sweep could collect one. A buffered job whose lease
        is gone is dropped unrun; a running one has its cancel token set."""
        with self._hold:
            jobs = [j for j in list(self._running.values())
                    if not j.finished and (self.auto_extend or not j.started)]
            if not jobs:
                return
            sent = time.monotonic()
            calls = [extend_call(self.keys, j.id, j.token, self.lease_ms) for j in jobs]
            replies = self.conn.executor.run_many(calls)
            lost = [j for j, reply in zip(jobs, replies, strict=True)
                    if not self._renewed(j, reply, sent)]
            for job in lost:
                if job.started:
                    cancel_tokens.cancel(job.cancel_token, "lease lost")
                else:
                    self._forget(job)
        if lost:
            log.warning("%d held job(s) lost their lease: %s", len(lost), [j.id for j in lost])

    def _renewed(self, job: JobContext, reply: Any, sent: float) -> bool:
        """Record one renewal's answer; False when the lease is no longer ours."""
        if isinstance(reply, LEASE_LOST) or (
                not isinstance(reply, Exception) and int(reply) in _LOST_CODES):
            return False
        if isinstance(reply, Exception):
            log.warning("job %s: lease renewal failed (%s)", job.id, reply)
        else:
            job.deadline = sent + self.lease_ms / 1000
        return True
