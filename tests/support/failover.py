"""Jobs flowing through a failover, and the exact account of what became of each one.

A producer thread adds jobs by their own ids (a batch that fails is sent again: an add
by id is idempotent), a Consumer settles them and records every settle the server
acknowledged (``on_settled``: the job id and its fencing token). The test kills the
primary while both run; afterwards each added job is looked up and classified. Redis
replication is asynchronous, so an acknowledged write can be lost with its primary:
the account counts every such loss instead of hoping there is none.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

import echomq
from echomq.errors import EchoMQError
from tests.support.waits import wait_until

BATCH = 50
HELD_SETTLES = 200


@dataclass
class FailoverReport:
    """What became of every job added during the run."""

    added: int
    completed: int
    """Jobs whose row says completed at the end."""
    lost_adds: int
    """Adds the old primary acknowledged whose row is gone (never replicated)."""
    in_flight: int
    """Jobs still pending, scheduled or active at the end (a sweep brings them back)."""
    acked_settles: int
    """Settles the server acknowledged to the Consumer (``on_settled`` calls)."""
    lost_acks: int
    """Acknowledged settles the new primary does not have: the job was settled again,
    or is no longer completed."""
    unacked_completions: int
    """Completed jobs whose standing settle's reply never reached the Consumer (the
    primary died between applying it and answering)."""
    shortfalls: int
    """Settles whose round trip's WAIT saw fewer replicas than asked (durable mode)."""
    shortfalls_at_kill: int
    """Of those, the ones before the primary died (none after it can be lost with it)."""
    settled_at_kill: int
    """Settles acknowledged before the primary died."""
    processed_after_failover: int
    """Settles acknowledged after the new primary took over."""

    def line(self) -> str:
        return (f"added {self.added}: completed {self.completed}, in flight "
                f"{self.in_flight}, lost adds {self.lost_adds}; acknowledged settles "
                f"{self.acked_settles}, of which lost {self.lost_acks}; completions "
                f"without an acknowledgment {self.unacked_completions}; durable "
                f"shortfalls {self.shortfalls} ({self.shortfalls_at_kill} before the "
                f"kill, of {self.settled_at_kill} settled by then); settled after the failover "
                f"{self.processed_after_failover}")


class Producer:
    """Adds batches of jobs with known ids until stopped, riding out a lost server."""

    def __init__(self, conn: echomq.Connection, queue: str, pause_s: float = 0.02) -> None:
        self.conn, self.queue, self.pause_s = conn, queue, pause_s
        self.added: list[str] = []
        self.retries = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> bool:
        """Stop adding (again is fine) and wait for the batch in hand: whether it ended."""
        self._stop.set()
        self._thread.join(30)
        return not self._thread.is_alive()

    def _run(self) -> None:
        tag = uuid.uuid4().hex[:8]
        n = 0
        while not self._stop.is_set():
            ids = [f"{tag}-{n + i}" for i in range(BATCH)]
            n += BATCH
            while True:  # the same ids again until acknowledged: idempotent
                try:
                    echomq.add_many(self.conn, self.queue, [{"i": i} for i in ids],
                                    job_ids=ids)
                    break
                except (EchoMQError, redis.RedisError):
                    self.retries += 1
                    if self._stop.wait(0.1):
                        return  # stopped while the server is gone: the test has failed
            self.added.extend(ids)
            self._stop.wait(self.pause_s)


def run_through_failover(url: str, queue: str, executor: str, *,
                         kill: Callable[[], None], promoted: Callable[[], None],
                         durable_replicas: int = 0, durable_timeout_ms: int = 500,
                         partition: Callable[[], None] | None = None) -> FailoverReport:
    """Jobs flowing, ``kill`` the primary, ``promoted`` waits for its replica to take
    over; the Consumer must carry on by itself until every job is settled. With
    ``partition`` (which cuts the replica off) the primary first settles at least
    ``HELD_SETTLES`` more jobs that its replica never sees, then dies."""
    producer_conn = echomq.connect(url, executor)  # type: ignore[arg-type]
    consumer_conn = echomq.connect(url, executor)  # type: ignore[arg-type]
    acks: Counter[tuple[str, int]] = Counter()
    lock = threading.Lock()

    def on_settled(job: Any, kind: str) -> None:
        with lock:
            acks[(job.id, job.attempts)] += 1

    consumer = echomq.Consumer(
        consumer_conn, queue, lambda job: "ok", concurrency=4, lease_ms=2_000,
        poll_ms=50, on_settled=on_settled, durable_replicas=durable_replicas,
        durable_timeout_ms=durable_timeout_ms)
    crashed: list[BaseException] = []

    def run() -> None:
        try:
            consumer.run(install_signals=False)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            crashed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    producer = Producer(producer_conn, queue)
    thread.start()
    producer.start()
    try:
        wait_until(lambda: consumer.processed >= 300, timeout=20)
        if partition is not None:
            partition()
            cut_off = consumer.processed
            wait_until(lambda: consumer.processed >= cut_off + HELD_SETTLES, timeout=20)
        kill()
        shortfalls_at_kill = consumer.durable_shortfalls
        settled_at_kill = consumer.processed
        promoted()
        at_promotion = consumer.processed
        # the Consumer carries on by itself: new settles land on the new primary
        wait_until(lambda: consumer.processed >= at_promotion + 300, timeout=30)
        assert producer.stop(), "the producer did not stop"
        assert thread.is_alive() and not crashed, crashed

        def settled() -> bool:
            c = echomq.counts(producer_conn, queue)
            return c.pending + c.active + c.scheduled == 0

        wait_until(settled, timeout=30, step=0.1)  # lapsed leases come back by the reap
        after = consumer.processed - at_promotion
    finally:  # nothing of this run may go on into the next test
        producer.stop()
        consumer.stop()
        thread.join(30)
        consumer_conn.close()
    assert not crashed, crashed
    try:
        report = account(producer_conn, queue, producer.added, acks,
                         consumer.durable_shortfalls, after)
        report.shortfalls_at_kill = shortfalls_at_kill
        report.settled_at_kill = settled_at_kill
        return report
    finally:
        producer_conn.close()


def account(conn: echomq.Connection, queue: str, added: list[str],
            acks: Counter[tuple[str, int]], shortfalls: int, after: int) -> FailoverReport:
    """Classify every added job; every acknowledged settle is either the one that stands
    (the row is completed with that token) or counted as lost."""
    per_job: dict[str, Counter[int]] = {}
    for (job_id, token), count in acks.items():
        per_job.setdefault(job_id, Counter())[token] += count
    assert set(per_job) <= set(added), "a settle of a job nobody added"
    completed = lost_adds = in_flight = lost_acks = unacked = 0
    for job_id in added:
        job = echomq.get_job(conn, queue, job_id)
        tokens = per_job.get(job_id, Counter())
        total = sum(tokens.values())
        if job is None:
            lost_adds += 1
            lost_acks += total
        elif job.state == "completed":
            completed += 1
            if tokens[job.attempts]:
                lost_acks += total - 1
            else:
                unacked += 1
                lost_acks += total
        else:
            in_flight += 1
            lost_acks += total
    report = FailoverReport(
        added=len(added), completed=completed, lost_adds=lost_adds, in_flight=in_flight,
        acked_settles=sum(acks.values()), lost_acks=lost_acks, unacked_completions=unacked,
        shortfalls=shortfalls, shortfalls_at_kill=0, settled_at_kill=0,
        processed_after_failover=after)
    # the account is exact: every job in one class, every acknowledgment kept or lost
    assert completed + lost_adds + in_flight == len(added)
    assert report.acked_settles == lost_acks + (completed - unacked)
    return report
