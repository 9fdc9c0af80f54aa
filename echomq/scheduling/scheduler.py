"""Scheduled batch jobs on APScheduler 3: the stalled sweep, cron fires, the archive fold,
retention.

One ``BatchScheduler`` runs any number of interval jobs in a background thread:
a stalled sweep per queue, the cron schedules of the connection's prefix (``add_cron``)
and, when configured, a fold of every declared stream and a pass of every queue's
retention policy (the queues in the connection's retained set).
Each job runs at most one instance at a time (``max_instances=1``) and missed
runs are coalesced into one, so a slow pass never piles up behind itself. Two
schedulers on the same queue are safe: each lapsed id leaves the active set in
exactly one atomic sweep, so no stall is counted twice, and each cron fire time is
enqueued by exactly one ``cron_fire`` call, whichever scheduler makes it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from echomq.jobs.stalled import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_LIMIT,
    DEFAULT_MAX_STALLED,
    sweep_stalled,
)
from echomq.models import StalledSweep
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.flows_across import deliver_outbox
from echomq.queue.keys import check_name
from echomq.queue.retention import RetentionReport, apply_all_retention
from echomq.scheduling.cron import fire_due

log = logging.getLogger("echomq.scheduler")

DEFAULT_FOLD_INTERVAL_MS = 60_000
DEFAULT_RETENTION_INTERVAL_MS = 60_000
DEFAULT_CRON_INTERVAL_MS = 1_000
"""How often the cron job looks for due fires: every second, so a seconds-level schedule
fires at most about a second late. A fixed tick (not one timed to the next fire) sees a
schedule another process added at once, and costs one set read plus one read per
scheduled queue per tick."""


_NEWS = ("error", "trim_refused")
"""Report fields that make a pass worth a log line whatever its counts."""
_NOT_COUNTS = ("cutoff",)
"""Integer report fields that are not counts of work done (a time)."""


def _worth_saying(report: Any) -> Any:
    """What of a pass's ``report`` (a report with ``to_dict``, or a dict of them per
    queue) did something: any count above zero, an error; None when nothing did, so an
    idle scheduler stays quiet. Structured, for one JSON log line."""
    if report is None:
        return None
    if isinstance(report, dict) and not hasattr(report, "to_dict"):
        found = {str(k): v for k, v in ((k, _worth_saying(r)) for k, r in report.items()) if v}
        return found or None
    row = report.to_dict() if hasattr(report, "to_dict") else report
    if not isinstance(row, dict):
        return row
    busy = any(isinstance(v, int) and not isinstance(v, bool) and v > 0
               for k, v in row.items() if k not in _NOT_COUNTS and not k.endswith("_at"))
    return row if busy or any(row.get(k) for k in _NEWS) else None


class BatchScheduler:
    """Periodic sweeps and folds; ``start()`` returns at once, ``stop()`` waits for a
    running pass to finish."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._scheduler = BackgroundScheduler(
            timezone=UTC,
            job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": None},
        )
        self.sweeps: dict[str, StalledSweep] = {}
        """The last pass's answer per queue, for status reporting."""
        self.passes = 0
        self.retained: dict[str, RetentionReport] = {}
        """The last retention pass's answer per queue."""
        self.retention_passes = 0
        self.fired: list[str] = []
        """The ids of the cron jobs this scheduler's last pass enqueued."""
        self._lock = threading.Lock()

    def add_sweep(
        self,
        queues: str | Iterable[str],
        *,
        interval_ms: int = DEFAULT_INTERVAL_MS,
        max_stalled: int = DEFAULT_MAX_STALLED,
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        """Sweep each queue for stalled jobs every ``interval_ms``."""
        validate.positive_int(interval_ms, "interval_ms")
        validate.positive_int(max_stalled, "max_stalled")
        validate.positive_int(limit, "limit")
        for queue in [queues] if isinstance(queues, str) else list(queues):
            check_name(queue, "queue name")
            self._add(f"sweep:{queue}", interval_ms, self.sweep_once, queue, max_stalled, limit)

    def add_cron(self, *, interval_ms: int = DEFAULT_CRON_INTERVAL_MS) -> None:
        """Fire the due cron schedules of every queue of the prefix every ``interval_ms``.

        Any number of schedulers may do this: each fire time is enqueued once."""
        validate.positive_int(interval_ms, "interval_ms")
        self._add("cron", interval_ms, self.fire_once)

    def fire_once(self) -> list[str] | None:
        """One cron pass; a failure is logged and the next pass tries again (a fire it
        missed is then fired once, late)."""
        try:
            fired = fire_due(self.conn)
        except Exception as exc:  # the server may be restarting; the next pass catches up
            log.warning("cron pass failed: %s", exc)
            return None
        with self._lock:
            self.fired = fired
        if fired:
            log.info("cron fired %s", json.dumps(fired))
        return fired

    def add_fold(self, fold: Callable[[], Any], *, interval_ms: int = DEFAULT_FOLD_INTERVAL_MS,
                 name: str = "fold") -> None:
        """Run ``fold()`` (for example ``echomq.archive.fold_declared`` bound to a
        floor and remote) every ``interval_ms``."""
        validate.positive_int(interval_ms, "interval_ms")
        self._add(name, interval_ms, self._guarded, name, fold)

    def add_retention(self, *, interval_ms: int = DEFAULT_RETENTION_INTERVAL_MS) -> None:
        """Apply every retained queue's policy every ``interval_ms`` (queues gain or lose
        a policy with ``set_retention``; each pass reads the set afresh)."""
        validate.positive_int(interval_ms, "interval_ms")
        self._add("retention", interval_ms, self.retention_once)

    def retention_once(self) -> dict[str, RetentionReport] | None:
        """One retention pass over every retained queue; a failure is logged and the
        next pass tries again (nothing unfolded is ever forgotten)."""
        try:
            reports = apply_all_retention(self.conn)
        except Exception as exc:  # the server may be restarting; the next pass retries
            log.warning("retention pass failed: %s", exc)
            return None
        with self._lock:
            self.retained.update(reports)
            self.retention_passes += 1
        return reports

    def _add(self, job_id: str, interval_ms: int, func: Callable[..., Any], *args: Any) -> None:
        self._scheduler.add_job(
            func, "interval", args=args, id=job_id, replace_existing=True,
            seconds=interval_ms / 1000, next_run_time=datetime.now(UTC),
        )

    def sweep_once(self, queue: str, max_stalled: int, limit: int) -> StalledSweep | None:
        """One sweep pass, then the queue's flow outbox delivered (outcomes owed to parents
        on other queues: a fallback beside the workers'); a failure is logged and the next
        pass tries again."""
        try:
            sweep = sweep_stalled(self.conn, queue, max_stalled, limit)
        except Exception as exc:  # the server may be restarting; the next pass retries
            log.warning("stalled sweep of %r failed: %s", queue, exc)
            return None
        with self._lock:
            self.sweeps[queue] = sweep
            self.passes += 1
        if sweep.recovered or sweep.dead:
            log.info("stalled sweep of %r: recovered %s, dead-lettered %s",
                     queue, sweep.recovered, sweep.dead)
        try:
            deliver_outbox(self.conn, queue)
        except Exception as exc:  # as the sweep's: the next pass retries
            log.warning("flow outbox of %r: delivery failed: %s", queue, exc)
        return sweep

    def _guarded(self, name: str, fold: Callable[[], Any]) -> None:
        try:
            report = fold()
        except Exception as exc:  # the next pass retries; nothing was trimmed that is not safe
            log.warning("%s failed: %s", name, exc)
            return
        done = _worth_saying(report)
        if done:  # a pass that did nothing (or reports nothing) logs nothing
            log.info("%s: %s", name, json.dumps(done, default=str, ensure_ascii=False))

    def start(self) -> BatchScheduler:
        """Start every job's first pass now: not when it was added (setup in between,
        such as opening a floor, would make the first passes overdue and APScheduler warn
        that they overlap)."""
        now = datetime.now(UTC)
        for job in self._scheduler.get_jobs():
            job.modify(next_run_time=now)
        self._scheduler.start()
        return self

    def stop(self, wait: bool = True) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=wait)

    def __enter__(self) -> BatchScheduler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
