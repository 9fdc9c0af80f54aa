"""Consumers on background threads, stopped and joined at the end of a test."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from echomq import Consumer
from echomq.queue.connection import Connection
from tests.support.waits import wait_until


class ConsumerThreads:
    """Starts Consumers of one queue on threads (``defaults`` are their options unless a
    start says otherwise); :meth:`stop_all` stops each and checks its thread ended."""

    def __init__(self, conn: Connection, queue: str, **defaults: Any) -> None:
        self.conn, self.queue, self.defaults = conn, queue, defaults
        self.running: list[tuple[Consumer, threading.Thread]] = []

    def start(self, handler: Callable[[Any], Any], **options: Any) -> Consumer:
        consumer = Consumer(self.conn, self.queue, handler, **{**self.defaults, **options})
        thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
        thread.start()
        self.running.append((consumer, thread))
        return consumer

    def stop_all(self) -> None:
        for consumer, thread in self.running:
            consumer.stop()
            thread.join(10)
            assert not thread.is_alive()


def run_until(conn: Connection, queue: str, handler: Callable[[Any], Any],
              done: Callable[[], Any], **options: Any) -> None:
    """Run one Consumer with quick settings until ``done()`` holds, then stop it."""
    quick = {"poll_ms": 20, "beat_ms": 50, "backoff_ms": 1, "backoff_cap_ms": 1, **options}
    threads = ConsumerThreads(conn, queue, **quick)
    threads.start(handler)
    try:
        wait_until(done)
    finally:
        threads.stop_all()
