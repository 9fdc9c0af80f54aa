"""A Consumer's first claim meets a quiet server: its beat (the worker's record, the
reap, each a script the server may have to load first) sends nothing until the first
claim round has its answer, then beats as before. Both executors, real servers."""

from __future__ import annotations

import threading
from typing import Any

import echomq
from echomq.queue.connection import Connection
from tests.support.consumers import ConsumerThreads
from tests.support.waits import wait_until


def recorded_round_trips(conn: Connection) -> list[tuple[str, str]]:
    """Patch this connection's executor to log ("sent" | "answered", transition) in order."""
    executor, log, lock = conn.executor, [], threading.Lock()
    run, run_many = executor.run, executor._run_many

    def note(what: str, name: Any) -> None:
        with lock:
            log.append((what, getattr(name, "name", name)))

    def logged_run(t: Any, keys: Any, args: Any) -> Any:
        note("sent", t)
        try:
            return run(t, keys, args)
        finally:
            note("answered", t)

    def logged_many(calls: Any, wait: Any) -> Any:
        for name, _, _ in calls:
            note("sent", name)
        try:
            return run_many(calls, wait)
        finally:
            for name, _, _ in calls:
                note("answered", name)

    executor.run = logged_run  # type: ignore[method-assign]
    executor._run_many = logged_many  # type: ignore[method-assign]
    return log


def test_the_beat_waits_for_the_first_claims_answer_then_beats(queue: str,
                                                               server_url: str,
                                                               executor: str) -> None:
    producer = echomq.connect(server_url, executor=executor)  # type: ignore[arg-type]
    conn = echomq.connect(server_url, executor=executor)  # type: ignore[arg-type]
    echomq.add_many(producer, queue, list(range(20)))
    log = recorded_round_trips(conn)
    threads = ConsumerThreads(conn, queue, beat_ms=50, poll_ms=20)
    consumer = threads.start(lambda job: None)
    try:
        wait_until(lambda: consumer.processed == 20)
        wait_until(lambda: log.count(("answered", "reap")) >= 3)  # it beats on
    finally:
        threads.stop_all()
        producer.close()
        conn.close()
    first_answer = log.index(("answered", "claim"))
    beat = [i for i, (what, name) in enumerate(log)
            if what == "sent" and name in ("worker_beat", "reap")]
    assert beat and beat[0] > first_answer, log[:12]
    assert log[0] == ("sent", "claim"), log[:12]
