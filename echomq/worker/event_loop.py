"""Async tasks: one event loop thread per worker process runs every coroutine a handler
returns.

A handler thread calls the handler; when the answer is a coroutine (an ``async def``
task), the thread hands it here and goes back to the buffer, so a few threads feed any
number of coroutines, bounded like every held job by the Consumer's ``concurrency`` and
its buffer. The coroutine runs as :func:`~echomq.worker.context.current_job`; a cancel
request or its timeout cancels it (``asyncio.CancelledError`` at its next await), and its
outcome goes to the settler like a thread's, concluded by the same functions.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from time import perf_counter
from typing import Any

from echomq.errors import CancelledError
from echomq.jobs import cancel as cancel_tokens
from echomq.worker.context import (
    FailurePolicy,
    HandlerOutcome,
    JobContext,
    _current,
    raised,
    returned,
)

log = logging.getLogger("echomq.consumer")


class EventLoop:
    """An asyncio loop on its own daemon thread, started on the first coroutine."""

    def __init__(self, *, result_limit: int, policy: FailurePolicy | None,
                 finish: Callable[[HandlerOutcome], None],
                 ended: Callable[[JobContext], None]) -> None:
        self.result_limit = result_limit
        self.policy = policy
        self.finish = finish
        self.ended = ended
        """Called with each job once its coroutine returned (the watchdog lets go of it)."""
        self.loop = asyncio.new_event_loop()
        self._incoming: deque[tuple[JobContext, Coroutine[Any, Any, Any]]] = deque()
        self._woken = False
        self._wake_lock = threading.Lock()
        self._running: set[asyncio.Task[None]] = set()
        """The loop keeps only weak references to its tasks: these keep them alive."""
        self._thread = threading.Thread(target=self._run_forever, name="emq-event-loop",
                                        daemon=True)
        self._thread.start()

    def _run_forever(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, job: JobContext, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` for ``job`` on the loop (from any thread). Hand-offs that arrive
        together wake the loop once: one self-pipe write for a batch, not one a job."""
        self._incoming.append((job, coro))
        with self._wake_lock:
            if self._woken:
                return
            self._woken = True
        self.loop.call_soon_threadsafe(self._start_incoming)

    def _start_incoming(self) -> None:
        with self._wake_lock:
            self._woken = False
        incoming, create, run, running = (self._incoming, self.loop.create_task, self._run,
                                          self._running)
        while incoming:
            running.add(create(run(*incoming.popleft())))  # _run discards its own task

    async def _run(self, job: JobContext, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.current_task()
        assert task is not None

        def cancel_task() -> None:
            self.loop.call_soon_threadsafe(task.cancel)

        job.on_cancel = cancel_task
        _current.set(job)  # in this task's own context, which ends with it: no reset
        started = perf_counter()
        try:
            if job.cancelled():
                coro.close()  # cancelled before it could start
                raise asyncio.CancelledError
            value = await coro
        except asyncio.CancelledError:
            found = cancel_tokens.check(job.cancel_token)
            outcome = raised(job, CancelledError(found.reason if found else "cancelled"),
                             self.policy)
        except Exception as exc:  # noqa: BLE001 - a task's failure is the job's, not ours
            outcome = raised(job, exc, self.policy)
        else:
            outcome = returned(job, value, self.result_limit, self.policy)
        finally:
            job.ran_s = perf_counter() - started
            job.on_cancel = None
            self._running.discard(task)  # no done callback a job: the loop holds it now
        self.ended(job)
        self.finish(outcome)

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel what still runs (the Consumer waited its grace and handed those jobs
        back), stop the loop, join its thread and close the loop."""
        if self.loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self.loop).result(timeout)
        except Exception as exc:  # noqa: BLE001 - stopping goes on
            log.warning("event loop: could not cancel every running task: %r", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()

    @staticmethod
    async def _cancel_all() -> None:
        current = asyncio.current_task()
        running = [t for t in asyncio.all_tasks() if t is not current]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=1.0)
