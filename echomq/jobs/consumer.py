"""The Consumer: a worker that claims in batches, runs handlers on threads and
settles in batches, with cooperative cancel, checkpoints, recovery and recording.

One loop thread talks to the server: each pass sends, in ONE round trip, the
settlements that finished since the last pass and a claim for the free slots.
Handlers run on ``concurrency`` threads. A pub/sub subscription wakes the loop
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
from typing import Any, Literal

import redis

from echomq.errors import ConnectionFailed, EchoMQError, InvalidArgument
from echomq.jobs import cancel as cancel_tokens
from echomq.jobs.handler import JobContext, Outcome, execute
from echomq.jobs.lease import reap
from echomq.jobs.settle import DEFAULT_BACKOFF_CAP_MS, DEFAULT_BACKOFF_MS, KEEP_ALL
from echomq.jobs.stalled import DEFAULT_MAX_STALLED, stalled_check
from echomq.queue import validate
from echomq.queue.claim import DEFAULT_LEASE_MS
from echomq.queue.connection import Connection
from echomq.queue.events import Event
from echomq.queue.executors import Call
from echomq.queue.keys import Keys

log = logging.getLogger("echomq.consumer")

Handler = Callable[[JobContext], Any]
Recovery = Literal["reap", "stalled"]
_WAKE = object()
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
        self.prefetch = validate.non_negative_int(
            prefetch if prefetch is not None else concurrency, "prefetch"
        )
        self.poll_s = validate.positive_int(poll_ms, "poll_ms") / 1000
        self.grace_s = validate.non_negative_int(shutdown_grace_ms, "shutdown_grace_ms") / 1000
        self.keep_completed = keep_completed
        self.backoff_ms = validate.positive_int(backoff_ms, "backoff_ms")
        self.backoff_cap_ms = validate.positive_int(backoff_cap_ms, "backoff_cap_ms")
        self.cancel = cancel
        self.record = record
        self.auto_extend = auto_extend

        self.processed = 0
        self.failed = 0
        self._max_inflight = self.concurrency + self.prefetch
        self._inflight = 0
        self._running: dict[str, JobContext] = {}
        self._work: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
        self._inbox: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
        self._done: list[Outcome] = []
        self._sent: list[Outcome] = []
        self._stop = threading.Event()
        self._force = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pubsub: Any = None
        self._pubsub_thread: Any = None

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
        self._inbox.put(_WAKE)

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
        while self._inflight > 0 and not self._force.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._gather(min(remaining, 0.2))
            self._send_settlements()
        self._send_settlements()
        self._release(list(self._running.values()))
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
        args: list[str | int] = [self.keys.base]
        for job in jobs:
            args += [job.id, job.token]
        try:
            self.conn.executor.run("release", [self.keys.active], args)
            log.info("handed back %d unfinished job(s)", len(jobs))
        except (EchoMQError, redis.RedisError) as exc:
            log.warning("could not hand back %d job(s); their leases will lapse: %s",
                        len(jobs), exc)
        for job in jobs:
            self._forget(job)

    # -- the loop ---------------------------------------------------------------

    def _loop(self) -> None:
        wait = 0.0
        failures = 0
        while not self._stop.is_set():
            self._gather(wait)
            if self._stop.is_set():
                break
            free = self._max_inflight - self._inflight
            want = min(free, self.batch_size) if free > 0 else 0
            if self._inflight and free < min(self.batch_size, self._max_inflight) // 2:
                want = 0  # wait for more slots, so claims stay batched under load
            calls = self._settlement_calls()
            if want:
                calls.append(("claim", [self.keys.pending, self.keys.scheduled, self.keys.active],
                              [self.keys.base, self.lease_ms, want]))
            if not calls:
                wait = self.poll_s
                continue
            try:
                replies = self.conn.executor.run_many(calls)
            except ConnectionFailed as exc:
                self._done, self._sent = self._sent + self._done, []
                failures += 1
                wait = min(5.0, 0.1 * 2**failures)
                log.warning("server unreachable (%s); retrying in %.1fs", exc, wait)
                self._stop.wait(wait)
                continue
            failures = 0
            claimed = replies.pop() if want else []
            self._settled(replies)
            if isinstance(claimed, Exception):
                log.error("claim failed: %s", claimed)
                claimed = []
            self._dispatch(claimed)
            if want and not claimed and not self._inflight:
                wait = self._idle_wait()
            elif want and not claimed:
                wait = self.poll_s
            else:
                wait = 0.0 if not self._inflight else self.poll_s

    def _gather(self, wait: float) -> None:
        """Move finished outcomes to ``_done``; block up to ``wait`` for the first one."""
        inbox = self._inbox
        try:
            item = inbox.get(timeout=wait) if wait > 0 else inbox.get_nowait()
        except stdlib_queue.Empty:
            return
        while True:
            if isinstance(item, Outcome):
                self._done.append(item)
            try:
                item = inbox.get_nowait()
            except stdlib_queue.Empty:
                return

    def _settlement_calls(self) -> list[Call]:
        """One complete call for every completion and cancellation, one fail call per failure."""
        done, self._sent = self._done, self._done
        self._done = []
        calls: list[Call] = []
        completes: list[str | int] = []
        for o in done:
            if o.kind in ("completed", "cancelled"):
                completes += [o.job.id, o.job.token, o.kind, o.text]
            elif o.kind == "failed":
                calls.append(("fail", [self.keys.active, self.keys.scheduled, self.keys.dead],
                              [self.keys.base, o.job.id, o.job.token, o.text, self.backoff_ms,
                               self.backoff_cap_ms, "1" if self.record else "0"]))
        if completes:
            calls.insert(0, ("complete", [self.keys.active, self.keys.completed],
                             [self.keys.base, "1" if self.record else "0",
                              self.keep_completed, *completes]))
        return calls

    def _settled(self, replies: list[Any]) -> None:
        """Account for the outcomes just sent (``_sent``), in the order they were sent."""
        sent = self._sent
        self._sent = []
        completes = [o for o in sent if o.kind in ("completed", "cancelled")]
        fails = [o for o in sent if o.kind == "failed"]
        codes: list[Any] = replies.pop(0) if completes else []
        if isinstance(codes, Exception):
            log.error("complete failed for %d job(s): %s", len(completes), codes)
            codes = [0] * len(completes)
        for o, code in zip(completes, codes, strict=True):
            if int(code) != 1:
                log.warning("job %s finished after its lease was lost (code %s); "
                            "its result was not recorded", o.job.id, code)
            self.processed += 1
            self._forget(o.job)
        for o, reply in zip(fails, replies, strict=True):
            if isinstance(reply, Exception):
                log.warning("job %s failed after its lease was lost: %s", o.job.id, reply)
            else:
                log.info("job %s failed (%s): %s", o.job.id,
                         "retrying" if reply == 1 else "dead", o.text.splitlines()[-1:])
            self.failed += 1
            self._forget(o.job)
        for o in sent:
            if o.kind == "lost":
                log.warning("job %s stopped: lease lost (%s)", o.job.id, o.text)
                self._forget(o.job)

    def _send_settlements(self) -> None:
        calls = self._settlement_calls()
        if not calls:
            return
        try:
            self._settled(self.conn.executor.run_many(calls))
        except ConnectionFailed as exc:
            log.warning("could not settle %d job(s): %s", len(self._sent), exc)
            for o in self._sent:
                self._forget(o.job)
            self._sent = []

    def _dispatch(self, flat: list[Any]) -> None:
        for i in range(1, len(flat), 3):
            job = JobContext(self.conn, self.queue, flat[i], int(flat[i + 1]), flat[i + 2],
                             self.lease_ms)
            self._running[job.id] = job
            self._inflight += 1
            self._work.put(job)

    def _forget(self, job: JobContext) -> None:
        if self._running.get(job.id) is job:
            del self._running[job.id]
        self._inflight -= 1

    def _idle_wait(self) -> float:
        """How long to sleep with nothing to do: the poll interval, or less when a
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
        due_in = (first[0][1] - (secs * 1000 + micros // 1000)) / 1000
        return max(0.005, min(self.poll_s, due_in))

    # -- threads ----------------------------------------------------------------

    def _work_loop(self) -> None:
        work, inbox, handler = self._work, self._inbox, self.handler
        while True:
            job = work.get()
            if job is _STOP:
                return
            inbox.put(execute(handler, job))

    def _subscribe(self) -> None:
        def on_message(message: dict[str, Any]) -> None:
            event = Event.decode(message.get("data", ""))
            if event is None:
                return
            if event.event == "added":
                self._inbox.put(_WAKE)
            elif event.event == "cancel" and self.cancel and event.job_id:
                job = self._running.get(event.job_id)
                if job is not None:
                    cancel_tokens.cancel(job.cancel_token, event.reason)
                    log.info("job %s: cancel requested (%s)", job.id, event.reason)

        def on_error(exc: BaseException, pubsub: Any, thread: Any) -> None:
            log.warning("event subscription lost (%s); reconnecting", exc)
            time.sleep(0.5)

        self._pubsub = self.conn.redis.pubsub(ignore_subscribe_messages=True)
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
            sweep = stalled_check(self.conn, self.queue, self.max_stalled)
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
        calls: list[Call] = [
            ("extend_lock", [self.keys.active, self.keys.job(j.id)], [j.id, j.token,
                                                                      self.lease_ms])
            for j in jobs
        ]
        for job, reply in zip(jobs, self.conn.executor.run_many(calls), strict=True):
            if isinstance(reply, Exception) or int(reply) != 1:
                cancel_tokens.cancel(job.cancel_token, "lease lost")
