"""An App's workers on threads for a test, with options that keep it short."""

from __future__ import annotations

import threading
from typing import Any

import echomq
from echomq.app.worker import Worker

QUICK = {"poll_ms": 20, "beat_ms": 50, "backoff_ms": 1, "backoff_cap_ms": 1}
"""Worker options that keep a test short: quick idle polls, beats and default retries."""



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
