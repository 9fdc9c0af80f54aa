"""An App on the test's connection, and its workers on threads, stopped at the end."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import echomq
from echomq.app.worker import Worker
from echomq.queue.connection import Connection

QUICK = {"poll_ms": 20, "beat_ms": 50, "backoff_ms": 1, "backoff_cap_ms": 1}
"""Worker options that keep a test short: quick idle polls, beats and default retries."""


@pytest.fixture
def app(conn: Connection) -> echomq.App:
    return echomq.App(conn=conn)


@pytest.fixture
def names() -> Callable[[str], str]:
    """Queue names no other test uses: ``names("mail")`` -> ``mail-<random>``."""
    suffix = uuid.uuid4().hex[:8]
    return lambda name: f"{name}-{suffix}"


class Workers:
    """Runs an App's workers on threads; :meth:`stop_all` stops and joins them."""

    def __init__(self) -> None:
        self.running: list[tuple[Worker, threading.Thread]] = []

    def start(self, app: echomq.App, queues: Any = None, **options: Any) -> Worker:
        worker = app.worker(queues, **{**QUICK, **options})
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
        thread.start()
        self.running.append((worker, thread))
        return worker

    def stop_all(self) -> None:
        for worker, thread in self.running:
            worker.stop()
            thread.join(10)
            assert not thread.is_alive()
        self.running.clear()


@pytest.fixture
def workers() -> Iterator[Workers]:
    found = Workers()
    yield found
    found.stop_all()
