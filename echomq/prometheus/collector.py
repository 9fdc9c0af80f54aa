"""The Prometheus collector: every metric computed at scrape time from Redis and the floor.

Nothing is kept between scrapes but the queue finder's SCAN cursor, so one scrape target
serves any number of worker processes, and two targets (the dashboard's ``/metrics`` and
``emq metrics``) report the same numbers.

The counters and histograms are kept in Redis by the settle scripts themselves
(``metrics:finished``, ``metrics:stalls``, ``metrics:run``, ``metrics:wait``; see
``_lib.lua``): each settled attempt is counted in the same atomic call that settles it,
so it is counted exactly once whatever folds, trims or restarts happen, for every queue
(declared or not), at the cost of a few ``HINCRBY`` per settle batch. Rebuilding them from
the outcome stream and the floor would cost a scrape a range read per queue plus state in
each exporter process (lost at its restart) and would miss undeclared queues.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from echomq.archive.floor import Floor
from echomq.errors import InvalidKey
from echomq.prometheus.queues import finder_for
from echomq.prometheus.reads import STATES, QueueSample, sample, server_ms
from echomq.queue.admin import OUTCOMES  # one name per meaning, as echomq.metrics
from echomq.queue.connection import Connection
from echomq.queue.keys import check_name
from echomq.queue.worker_events import WORKER_EVENTS

BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000,
              900000, 3600000)
"""The histograms' upper bounds in ms: ``EMQ_BUCKETS_MS`` in ``_lib.lua`` (a test holds
them equal)."""
STALL_RESULTS = ("recovered", "dead_lettered")
"""The events a worker supervisor counts per queue (``echomq.app.supervisor``)."""

FloorArg = Floor | str | os.PathLike[str] | None


class EchoCollector(Collector):
    """Reads every known queue of ``conn`` (and ``floor``, when given) on ``collect``."""

    def __init__(self, conn: Connection, floor: FloorArg = None) -> None:
        self.conn = conn
        self.floor = floor

    def collect(self) -> Iterator[Metric]:
        if self.floor is None or isinstance(self.floor, Floor):
            yield from self._collect(self.floor)
            return
        # a path: opened for this scrape (instances of one path share one environment in
        # a process, so this is cheap)
        floor = Floor(self.floor)
        try:
            yield from self._collect(floor)
        finally:
            floor.close()

    def _collect(self, floor: Floor | None) -> Iterator[Metric]:
        finder = finder_for(self.conn)
        queues = set(finder.found())
        declared = {str(q) for q in self.conn.redis.smembers(self.conn.declared_set)}
        checkpoints: dict[str, str] = {}
        if floor is not None:
            queues |= set(floor.queues())
            checkpoints = {q: floor.checkpoint(q) for q in declared}
        now = server_ms(self.conn)
        samples = sample(self.conn, {q for q in queues if _valid(q)}, declared, checkpoints,
                         now)
        yield from _families(samples, now, floor)
        yield GaugeMetricFamily(
            "echomq_foreign_keys", "Keys under the prefix that are not UTF-8 (another "
            "writer's), skipped by the last full SCAN for queues.", value=finder.skipped)


def _valid(queue: str) -> bool:
    try:
        check_name(queue, "queue name")
    except InvalidKey:
        return False
    return True


def _families(samples: list[QueueSample], now: int, floor: Floor | None) -> Iterator[Metric]:
    jobs = GaugeMetricFamily("echomq_jobs", "Jobs in each state.", labels=["queue", "state"])
    finished = CounterMetricFamily(
        "echomq_jobs_finished", "Settled attempts by outcome: completed, cancelled, "
        "retried (failed, another try scheduled), dead (dead-lettered).",
        labels=["queue", "outcome"])
    workers = CounterMetricFamily(
        "echomq_worker_events", "What happened to workers: runs that reached their "
        "timeout (timeouts), settled without their thread (abandoned) or process (killed); "
        "worker child processes that died, were restarted or recycled (--processes).",
        labels=["queue", "event"])
    stalls = CounterMetricFamily(
        "echomq_stalls", "Lapsed leases the stalled sweep recovered or dead-lettered.",
        labels=["queue", "result"])
    oldest = GaugeMetricFamily(
        "echomq_oldest_pending_age_seconds",
        "Age of the oldest pending job (0 when none is pending).", labels=["queue"])
    past_due = GaugeMetricFamily(
        "echomq_active_leases_past_due", "Active jobs whose lease has lapsed.",
        labels=["queue"])
    paused = GaugeMetricFamily(
        "echomq_queue_paused", "1 while the queue is paused (claims hand out nothing).",
        labels=["queue"])
    lag_entries = GaugeMetricFamily(
        "echomq_archive_lag_entries", "Entries in the outcome stream not yet trimmed into "
        "the archive.", labels=["queue"])
    lag_seconds = GaugeMetricFamily(
        "echomq_archive_lag_seconds", "Age of the oldest stream entry not yet folded "
        "(0 when none).", labels=["queue"])
    fold = GaugeMetricFamily(
        "echomq_archive_last_fold_duration_seconds", "How long the last completed fold "
        "took.", labels=["queue"])
    run = HistogramMetricFamily(
        "echomq_job_run_seconds", "Time from an attempt's claim to its settle.",
        labels=["queue"])
    wait = HistogramMetricFamily(
        "echomq_job_wait_seconds", "Time from a job's creation to its last claim, per "
        "settled attempt.", labels=["queue"])
    for s in samples:
        q = [s.queue]
        for state in STATES:
            jobs.add_metric([s.queue, state], s.jobs[state])
        for outcome in OUTCOMES:
            finished.add_metric([s.queue, outcome], s.finished.get(outcome, 0))
        for result in STALL_RESULTS:
            stalls.add_metric([s.queue, result], s.stalls.get(result, 0))
        for event in WORKER_EVENTS:
            workers.add_metric([s.queue, event], s.workers.get(event, 0))
        oldest.add_metric(q, _age(now, s.oldest_created))
        past_due.add_metric(q, s.past_due)
        paused.add_metric(q, int(s.paused))
        if s.declared:
            lag_entries.add_metric(q, s.stream_length)
            lag_seconds.add_metric(q, _age(now, s.oldest_unfolded))
        last = floor.last_fold(s.queue) if floor is not None else None
        if last is not None:
            fold.add_metric(q, last[0])
        run.add_metric(q, *_buckets(s.run))
        wait.add_metric(q, *_buckets(s.wait))
    yield from (jobs, finished, workers, stalls, oldest, past_due, paused, lag_entries,
                lag_seconds, fold, run, wait)


def _age(now: int, then: int | None) -> float:
    return 0.0 if then is None else max(now - then, 0) / 1000


def _buckets(hist: dict[str, int]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative ``(le, count)`` pairs in seconds, and the sum in seconds."""
    out: list[tuple[str, float]] = []
    total = 0
    for le in BUCKETS_MS:
        total += hist.get(str(le), 0)
        out.append((_le(le), total))
    out.append(("+Inf", total + hist.get("inf", 0)))
    return out, hist.get("sum", 0) / 1000


def _le(ms: int) -> str:
    return repr(ms / 1000)
