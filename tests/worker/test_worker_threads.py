"""No exception ends a Consumer thread silently: unstorable results are the job's
failure (dead at once), a server that times out is retried, and anything else
takes the Consumer down loudly with ``ConsumerCrashed``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import echomq
from echomq.queue.connection import Connection
from echomq.queue.transitions import intake, settles
from echomq.worker import beat as beat_module
from echomq.worker import slots as consumer_module
from echomq.worker.consumer import Consumer
from tests.support.waits import wait_until


def deep_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


UNSTORABLE: dict[str, Callable[[], Any]] = {
    "deep": lambda: deep_list(5_000),
    "nan": lambda: float("nan"),
    "infinity": lambda: [float("inf")],
    "object": lambda: object(),
    "big": lambda: "x" * 2_000,
    "bad verdict": lambda: echomq.CancelVerdict(42),  # type: ignore[arg-type]
}


class Running:
    """A Consumer on a thread, with what ``run()`` raised."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.consumer.run(install_signals=False)
        except BaseException as exc:  # noqa: BLE001 - kept for the test to look at
            self.error = exc


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for r in started:
        r.consumer.stop()
        r.consumer.stop()
        r.thread.join(15)
        assert not r.thread.is_alive()


def start(started: list[Running], conn: Connection, queue: str, handler: Any, **options: Any
          ) -> Running:
    options.setdefault("poll_ms", 100)
    r = Running(Consumer(conn, queue, handler, **options))
    started.append(r)
    return r


def test_unstorable_results_are_dead_lettered_at_once_and_later_jobs_still_run(
    conn: Connection, queue: str, running: list[Running]
) -> None:
    """One handler thread: had any of these results killed it, the jobs after it
    would never run."""
    bad = {kind: echomq.add(conn, queue, {"kind": kind}, max_attempts=5) for kind in UNSTORABLE}
    good = echomq.add_many(conn, queue, [{"kind": "ok"} for _ in range(3)])

    def handler(job: Any) -> Any:
        kind = job.payload["kind"]
        return UNSTORABLE[kind]() if kind in UNSTORABLE else "fine"

    r = start(running, conn, queue, handler, concurrency=1, result_limit=1_024,
              backoff_ms=10)
    wait_until(lambda: echomq.counts(conn, queue).completed == 3)
    wait_until(lambda: echomq.counts(conn, queue).dead == len(bad))
    for kind, job_id in bad.items():
        job = echomq.get_job(conn, queue, job_id)
        assert job is not None and job.state == "dead", kind
        assert job.attempts == 1, kind  # never retried: it would fail the same way
        assert (job.last_error or "").startswith("result not storable: "), job.last_error
    big = echomq.get_job(conn, queue, bad["big"])
    assert big is not None and "over the result limit of 1024" in (big.last_error or "")
    for job_id in good:
        job = echomq.get_job(conn, queue, job_id)
        assert job is not None and job.result == "fine"
    # the Consumer counts a settle once its reply is read, a moment after Redis has it
    wait_until(lambda: (r.consumer.processed, r.consumer.failed) == (3, len(bad)))


def test_result_limit_is_checked(conn: Connection, queue: str) -> None:
    with pytest.raises(echomq.InvalidArgument):
        Consumer(conn, queue, print, result_limit=0)


def test_a_server_that_times_out_is_retried_by_every_thread(
    private_server: Any, executor: str, queue: str, running: list[Running]
) -> None:
    """redis-py's TimeoutError is not a ConnectionError: a paused server made the
    settler's pipeline time out, and the settler thread died with it."""
    conn = echomq.connect(private_server.url + "?socket_timeout=0.2",
                          executor=executor)  # type: ignore[arg-type]
    reader = echomq.connect(private_server.url)  # the test's own reads never time out
    admin = redis.Redis.from_url(private_server.url)
    total = 300
    echomq.add_many(reader, queue, [{"n": i} for i in range(total)])
    r = start(running, conn, queue, lambda job: time.sleep(0.002), concurrency=2,
              lease_ms=1_000, beat_ms=100)
    wait_until(lambda: echomq.counts(reader, queue).completed >= 20)
    admin.execute_command("CLIENT", "PAUSE", 700, "ALL")
    time.sleep(0.8)
    wait_until(lambda: echomq.counts(reader, queue).completed == total, timeout=30)
    assert r.thread.is_alive() and r.error is None
    admin.close()
    reader.close()


def _break_handler_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("injected into the handler thread")

    monkeypatch.setattr(consumer_module, "execute", broken)


def _break_settler(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected into the settler")

    monkeypatch.setattr(settles, "complete_call", broken)


def _break_beat(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("injected into the beat")

    monkeypatch.setattr(beat_module, "reap", broken)


@pytest.mark.parametrize("thread, breaker", [
    ("emq-handler-0", _break_handler_thread),
    ("emq-settler", _break_settler),
    ("emq-beat", _break_beat),
])
def test_a_thread_that_dies_takes_the_consumer_down_loudly(
    conn: Connection, queue: str, running: list[Running], caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch, thread: str, breaker: Callable[[pytest.MonkeyPatch], None],
) -> None:
    """Fault injection: one internal step raises an exception nobody expects. The
    Consumer stops by itself, logs at ERROR, ``run()`` raises ``ConsumerCrashed``
    naming the thread, and no job is left held."""
    breaker(monkeypatch)
    job_id = echomq.add(conn, queue, {})
    caplog.set_level(logging.ERROR, logger="echomq.consumer")
    r = start(running, conn, queue, lambda job: "ok", concurrency=1, lease_ms=2_000,
              shutdown_grace_ms=60_000)
    r.thread.join(15)
    assert not r.thread.is_alive(), "the Consumer went on without its thread"
    assert isinstance(r.error, echomq.ConsumerCrashed) and thread in str(r.error)
    assert any(rec.levelno == logging.ERROR and thread in rec.getMessage()
               for rec in caplog.records)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.state in ("pending", "completed")


def test_an_unexpected_claim_loop_error_is_raised_by_run(
    conn: Connection, queue: str, running: list[Running], monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("injected into the claim loop")

    monkeypatch.setattr(intake, "claim_call", broken)
    echomq.add(conn, queue, {})
    r = start(running, conn, queue, lambda job: "ok")
    r.thread.join(15)
    assert not r.thread.is_alive()
    assert isinstance(r.error, RuntimeError)
    assert echomq.counts(conn, queue).pending == 1


def test_the_event_subscription_survives_a_dropped_connection(
    private_server: Any, executor: str, queue: str, running: list[Running]
) -> None:
    """The pub/sub thread reconnects and resubscribes: a cancel sent after its
    connection was killed still reaches the running handler."""
    conn = echomq.connect(private_server.url, executor=executor)  # type: ignore[arg-type]
    started = threading.Event()

    def careful(job: Any) -> Any:
        started.set()
        for _ in range(1_000):
            found = echomq.cancel.check(job.cancel_token)
            if found is not None:
                return echomq.CancelVerdict(found.reason)
            time.sleep(0.01)
        return "never cancelled"

    start(running, conn, queue, careful, cancel=True)
    wait_until(lambda: conn.redis.pubsub_numsub(f"emq:{{{queue}}}:events")[0][1] == 1)
    conn.redis.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
    job_id = echomq.add(conn, queue, {})
    assert started.wait(5)
    wait_until(lambda: conn.redis.pubsub_numsub(f"emq:{{{queue}}}:events")[0][1] == 1)
    echomq.cancel.request(conn, queue, job_id, reason="after the drop")
    wait_until(lambda: echomq.counts(conn, queue).completed == 1)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and job.cancel_reason == "after the drop" and job.result is None


@pytest.mark.parametrize("record", [True, False])
def test_a_consumer_started_while_its_server_is_down_waits_for_it(
    private_server: Any, queue: str, running: list[Running], record: bool
) -> None:
    """A worker started during a server restart (refused, or loading its AOF) used to
    exit at once with redis-py's error from declaring its stream."""
    conn = echomq.connect(private_server.url)
    echomq.add(conn, queue, {"n": 1})
    private_server.stop()
    r = start(running, conn, queue, lambda job: "done", record=record)
    time.sleep(1.0)
    assert r.thread.is_alive() and r.error is None
    private_server.start()
    wait_until(lambda: echomq.counts(conn, queue).completed == 1, timeout=15)
    assert r.error is None
    conn.close()
