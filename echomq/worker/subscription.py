"""The Consumer's one wake-up source: a pub/sub subscription to every queue it serves.

An ``added`` event (an add into an empty queue) wakes the claim loop, however many
queues there are, so an idle worker parks on one socket instead of polling each queue;
a ``cancel`` event for a held job sets its cancel token. A lost server is reconnected
(and resubscribed) by redis-py's worker thread on its next read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from echomq.queue.connection import Connection
from echomq.queue.events import Event
from echomq.worker.held import Held
from echomq.worker.queues import QueuePlan

log = logging.getLogger("echomq.consumer")


class Subscription:
    """Listens on each queue's events channel, on redis-py's pub/sub thread."""

    def __init__(self, conn: Connection, plan: QueuePlan, held: Held,
                 added: Callable[[str], None], *, cancel: bool) -> None:
        self.conn = conn
        self.plan = plan
        self.held = held
        self.added = added
        self.cancel = cancel
        self._thread: Any = None

    def start(self) -> None:
        pubsub = self.conn.redis.pubsub(  # type: ignore[no-untyped-call]
            ignore_subscribe_messages=True)
        pubsub.subscribe(**{keys.events: partial(self._on_message, keys.queue)
                            for keys in self.plan.keys})
        self._thread = pubsub.run_in_thread(sleep_time=0.5, daemon=True,
                                            exception_handler=self._on_error)

    def stop(self) -> None:
        """End the thread (it closes the pub/sub on its way out)."""
        if self._thread is not None:
            self._thread.stop()
            self._thread.join(timeout=2)

    def _on_message(self, queue: str, message: dict[str, Any]) -> None:
        event = Event.decode(message.get("data", ""))
        if event is None:
            return
        if event.event == "added":
            self.added(queue)
        elif event.event == "cancel" and self.cancel and event.job_id:
            job = self.held.cancel(queue, event.job_id, event.reason)
            if job is not None:
                log.info("job %s: cancel requested (%s)", job.id, event.reason)

    @staticmethod
    def _on_error(exc: BaseException, pubsub: Any, thread: Any) -> None:
        # redis-py's worker thread goes on after this returns: a lost server is
        # reconnected (and resubscribed) on the next read
        log.warning("event subscription failed (%r); going on", exc)
        time.sleep(0.5)
