"""Issue 22: one Consumer over many queues parks on one wake-up source when idle."""

from __future__ import annotations

import threading
import time

import pytest

import echomq
from echomq.servers.valkey import EmbeddedValkey
from tests.support.waits import wait_until


def claim_calls(server: EmbeddedValkey) -> int:
    """Script calls the server has run (every claim is one)."""
    client = echomq.connect(server.url).redis
    stats = client.info("commandstats")
    return sum(int(stats.get(name, {}).get("calls", 0))
               for name in ("cmdstat_evalsha", "cmdstat_fcall"))


@pytest.mark.plain_only
@pytest.mark.parametrize("executor", ["scripts", "functions"])
def test_an_idle_worker_over_ten_queues_parks_and_an_add_wakes_it(
        private_server: EmbeddedValkey, executor: str) -> None:
    conn = echomq.connect(private_server.url, executor)  # type: ignore[arg-type]
    queues = [f"idle-{n}" for n in range(10)]
    done: list[str] = []
    consumer = echomq.Consumer(conn, queues, lambda job: done.append(job.id),
                               poll_ms=5_000, beat_ms=60_000)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    thread.start()
    try:
        time.sleep(0.5)  # started, and parked after its first round
        before = claim_calls(private_server)
        time.sleep(2.0)
        idle_calls = claim_calls(private_server) - before
        assert idle_calls <= 10, idle_calls  # at most one round in 2 s, no busy polling
        sent = time.monotonic()
        job_id = echomq.add(conn, queues[-1], {"n": 1})
        wait_until(lambda: done == [job_id], timeout=4)
        assert time.monotonic() - sent < 2.0  # woken by the add, not by the 5 s poll
    finally:
        consumer.stop()
        thread.join(10)
    conn.close()


def test_a_due_job_of_a_skipped_queue_is_still_taken_first(conn, queue) -> None:
    """A queue that answered empty is skipped briefly; a job scheduled on it that falls due
    runs before the busy lower queue's backlog is done."""
    high, low = f"{queue}-high", f"{queue}-low"
    ran: list[str] = []

    def handler(job: echomq.JobContext) -> None:
        ran.append(job.queue)
        time.sleep(0.002)

    echomq.add_many(conn, low, [{"n": i} for i in range(400)])
    echomq.add(conn, high, {"n": 0}, delay_ms=300)
    consumer = echomq.Consumer(conn, [high, low], handler, concurrency=1, prefetch=0,
                               batch_size=1, poll_ms=20)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    thread.start()
    try:
        wait_until(lambda: high in ran, timeout=10)
    finally:
        consumer.stop()
        thread.join(10)
    assert 0 < ran.index(high) < 399  # taken while low still had a backlog
