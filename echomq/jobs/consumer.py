"""The Consumer: a worker that claims in batches, runs handlers on threads and
settles in batches, with cooperative cancel, checkpoints, recovery and recording.

The claim loop takes a batch (ONE round trip) whenever enough slots are free;
handlers run on ``concurrency`` threads; the settler settles what they finish,
many jobs per round trip, beside the claim loop. A pub/sub subscription wakes the loop
when jobs arrive on an empty queue and forwards cancel events to the running
job's token. A beat thread runs the recovery leg chosen at start.
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

from echomq.errors import ConnectionFailed, EchoMQError, InvalidArgument
from echomq.jobs import cancel as cancel_tokens
from echomq.jobs.handler import JobContext, execute
from echomq.jobs.lease import extend_call, reap
from echomq.jobs.settle import DEFAULT_BACKOFF_CAP_MS, DEFAULT_BACKOFF_MS, KEEP_ALL, release_many
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
        if isinstance(keep_completed, bool) or not isinstance(keep_completed, int) or (
            keep_completed < KEEP_ALL
        ):
            raise InvalidArgument("keep_completed must be -1 (keep all) or a count >= 0")
        self.cancel = cancel
        self.record = record
        self.auto_extend = auto_extend

        self._job_seconds = self.lease_ms / 1000  # a running estimate; pessimistic at first
        self._inflight = 0
        self._slots = threading.Condition()
        self._running: dict[str, JobContext] = {}
        self._work: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
        self._settler = Settler(
            conn, self.keys, record=record, keep_completed=keep_completed,
            backoff_ms=validate.positive_int(backoff_ms, "backoff_ms"),
            backoff_cap_ms=validate.positive_int(backoff_cap_ms, "backoff_cap_ms"),
            forget=self._forget,
        )
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._force = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pubsub: Any = None
        self._pubsub_thread: Any = None

    @property
    def processed(self) -> int:
        """Jobs settled as completed or cancelled by this Consumer."""
        return self._settler.completed

    @property
    def failed(self) -> int:
        """Handler failures this Consumer settled (retried or dead-lettered)."""
        return self._settler.failed

    # -- public -------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> None:
        """Work until stopped; then hand back what is unfinished and return."""
        restore = self._install_signals() if install_signals else None
        self._start()
        try:
            self._loop()
        finally:
            try:
                self._shutdown()
            finally:
                if restore:
                    restore()

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
        if self.record:
            from echomq.archive.declared import declare

            declare(self.conn, self.queue)
        self._settler.start()
        for n in range(self.concurrency):
            t = threading.Thread(target=self._work_loop, name=f"emq-handler-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        self._subscribe()
        beat = threading.Thread(target=self._beat_loop, name="emq-beat", daemon=True)
        beat.start()
        log.info("consumer on %r: concurrency %d, lease %d ms, recovery %s, executor %s",
                 self.queue, self.concurrency, self.lease_ms, self.recovery,
                 self.conn.executor_name)

    def _shutdown(self) -> None:
        """Hand back unstarted jobs at once, give running ones the grace period,
        then hand back the rest so another worker can take them without waiting."""
        unstarted: list[JobContext] = []
        while True:
            try:
                item = self._work.get_nowait()
            except stdlib_queue.Empty:
                break
            if isinstance(item, JobContext):
                unstarted.append(item)
        self._release(unstarted)
        deadline = time.monotonic() + self.grace_s
        with self._slots:
            while self._inflight > 0 and not self._force.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._slots.wait(min(remaining, 0.1))
        self._release([j for j in list(self._running.values()) if not j.finished])
        self._settler.stop(give_up=True)
        for _ in self._threads:
            self._work.put(_STOP)
        if self._pubsub_thread is not None:
            self._pubsub_thread.stop()  # the worker thread closes the pub/sub on its way out
            self._pubsub_thread.join(timeout=2)
        log.info("consumer on %r stopped: %d processed, %d failed",
                 self.queue, self.processed, self.failed)

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
                self._dispatch(flat)
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

    def _dispatch(self, flat: list[Any]) -> None:
        jobs = [
            JobContext(self.conn, self.queue, flat[i], int(flat[i + 1]), flat[i + 2],
                       self.lease_ms)
            for i in range(1, len(flat), 3)
        ]
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
        work, inbox, handler, clock = self._work, self._settler.inbox, self.handler, perf_counter
        while True:
            job = work.get()
            if job is _STOP:
                return
            started = clock()
            outcome = execute(handler, job)
            self._observe(clock() - started)
            inbox.put(outcome)

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
            log.warning("event subscription lost (%s); reconnecting", exc)
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
            except (EchoMQError, redis.RedisError) as exc:
                log.warning("beat failed: %s", exc)
            if self._stop.wait(self.beat_ms / 1000):
                return

    def _beat(self) -> None:
        if self.recovery == "stalled":
            sweep = sweep_stalled(self.conn, self.queue, self.max_stalled)
            if sweep.recovered or sweep.dead:
                log.info("stalled sweep: recovered %s, dead-lettered %s",
                         sweep.recovered, sweep.dead)
        else:
            back = reap(self.conn, self.queue)
            if back:
                log.info("reaped %d lapsed lease(s): %s", len(back), back)
        if self.auto_extend and self._running:
            self._extend_running()

    def _extend_running(self) -> None:
        jobs = list(self._running.values())
        calls = [extend_call(self.keys, j.id, j.token, self.lease_ms) for j in jobs]
        for job, reply in zip(jobs, self.conn.executor.run_many(calls), strict=True):
            if isinstance(reply, Exception) or int(reply) != 1:
                cancel_tokens.cancel(job.cancel_token, "lease lost")
