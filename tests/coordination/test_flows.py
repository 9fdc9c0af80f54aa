"""Issue 25, flows: chain, group, chord over task signatures, exactly once."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import echomq
from echomq.app.worker import Worker
from echomq.queue.connection import Connection
from tests.support.waits import wait_until

QUICK = {"poll_ms": 20, "beat_ms": 50, "backoff_ms": 1, "backoff_cap_ms": 1}


class Workers:
    """An App's workers on threads, stopped and joined at the end."""

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


@pytest.fixture
def workers() -> Iterator[Workers]:
    found = Workers()
    yield found
    found.stop_all()


@pytest.fixture
def flowq() -> str:
    return f"flows-{uuid.uuid4().hex[:8]}"


def test_a_chain_passes_each_result_to_the_next_step(conn: Connection, flowq: str,
                                                     workers: Workers) -> None:
    app = echomq.App(conn=conn)

    @app.task(queue=flowq, name="fetch")
    def fetch(url: str) -> str:
        return f"<{url}>"

    @app.task(queue=flowq, name="parse")
    def parse(text: str, upper: bool = False) -> str:
        return text.upper() if upper else text + "!"

    @app.task(queue=flowq, name="store")
    def store(text: str, where: str) -> str:
        return f"{where}:{text}"

    last = echomq.chain(fetch.s("u"), parse.s(upper=True), store.s("db")).enqueue(app)
    job = echomq.get_job(conn, flowq, last)
    assert job is not None and job.state == "waiting"
    workers.start(app, [flowq])
    wait_until(lambda: echomq.get_job(conn, flowq, last).state == "completed")
    done = echomq.get_job(conn, flowq, last)
    assert done.result == "db:<U>"
    [middle] = echomq.children(conn, flowq, last)
    [first] = echomq.children(conn, flowq, middle)
    assert echomq.get_job(conn, flowq, first).parent == middle
    assert echomq.get_job(conn, flowq, middle).parent == last
