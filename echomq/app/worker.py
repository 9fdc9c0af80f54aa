"""An App's worker: one Consumer over the App's queues whose handler routes by name.

It adds what a task worker owes its operator: a start line naming the server (password
redacted), the data folder when it is the embedded one, the queues and the tasks; and one
INFO line per finished job on the ``echomq.worker`` logger.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from echomq.app.routing import Router
from echomq.errors import InvalidArgument
from echomq.queue.claim import DEFAULT_LEASE_MS
from echomq.worker.consumer import Consumer
from echomq.worker.options import check_timeout

if TYPE_CHECKING:
    from echomq.app.app import App

log = logging.getLogger("echomq.worker")

ASYNC_HANDOFF_THREADS = 1
"""Handler threads of a worker whose tasks are all ``async def``: it only hands each
claimed job's coroutine to the event loop, where ``concurrency`` of them run at once (a
second thread measured no faster: `python bench/run.py tasks`)."""


class Worker:
    """Runs an App's tasks until ``stop()``, SIGTERM or SIGINT (:meth:`run`)."""

    def __init__(self, app: App, queues: str | Sequence[str], *, concurrency: int = 8,
                 **consumer_options: Any) -> None:
        self.app = app
        self.router = Router(app.tasks)
        lease_ms = consumer_options.get("lease_ms", DEFAULT_LEASE_MS)
        for task in app.tasks.values():
            if task.timeout_s is not None:
                try:
                    check_timeout(task.timeout_s, task.timeout_grace_s, lease_ms)
                except InvalidArgument as exc:
                    raise InvalidArgument(f"task {task.name!r}: {exc}") from None
        if app.tasks and all(task.is_async for task in app.tasks.values()):
            # async tasks run on the event loop: a thread only hands each one over
            consumer_options.setdefault("threads", min(concurrency, ASYNC_HANDOFF_THREADS))
        # the bound method, not the Router: calling an instance goes through its type's
        # __call__ slot, ~600 instructions a job more (callgrind)
        self.consumer = Consumer(app.conn, queues, self.router.__call__, concurrency=concurrency,
                                 failure_policy=self.router.plan, log_finished=True,
                                 timeouts=self.router.timeouts, **consumer_options)
        self.queues = self.consumer.queues
        if self.consumer.heartbeat is not None:
            self.consumer.heartbeat.describe(kind="worker", tasks=self.router.tasks)

    def start_line(self) -> str:
        """What this worker serves, from where: its first log line."""
        conn = self.consumer.conn
        where = conn.safe_url
        if conn.url.startswith("unix://"):  # the embedded server: its socket is in the folder
            where += f" (data folder {PurePath(urlsplit(conn.url).path).parent})"
        tasks = ", ".join(sorted(self.router.tasks)) or "none"
        return (f"worker at {where}: queues {self.consumer.plan.describe()} "
                f"({'weighted' if self.consumer.plan.weighted else 'strict order'}), "
                f"concurrency {self.consumer.concurrency}; tasks: {tasks}")

    def run(self, *, install_signals: bool = True) -> None:
        """Work until stopped; see :meth:`echomq.Consumer.run`."""
        log.info("%s", self.start_line())
        self.consumer.run(install_signals=install_signals)

    def stop(self) -> None:
        """Stop claiming; running tasks get the grace period. A second call forces."""
        self.consumer.stop()

    @property
    def processed(self) -> int:
        """Jobs completed or cancelled by this worker."""
        return self.consumer.processed

    @property
    def failed(self) -> int:
        """Failed attempts settled (retried plus dead)."""
        return self.consumer.failed

    @property
    def retried(self) -> int:
        return self.consumer.retried

    @property
    def dead(self) -> int:
        return self.consumer.dead
