"""One name per meaning (issue 20, item 18): ``emq status``, the Prometheus metrics and
the Consumer's stop line say ``completed``, ``cancelled``, ``retried``, ``dead`` and
``failed`` for the same things, and ``emq status`` keeps the rows a state holds now apart
from the lifetime totals (a purge lowers the first, never the second)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from click.testing import CliRunner

import echomq
from echomq.cli import main
from echomq.prometheus import render
from tests.prometheus.scrape import parse, value
from tests.support import consumers

TOTALS = {"completed": 2, "cancelled": 1, "retried": 1, "dead": 1}
"""Two jobs completed, one cancelled, one failed twice: retried once, then dead."""


def handler(job: Any) -> Any:
    if job.payload["do"] == "fail":
        raise RuntimeError("boom")
    if job.payload["do"] == "cancel":
        return echomq.CancelVerdict("not today")
    return {"ok": True}


def settle_all(conn: echomq.Connection, queue: str) -> None:
    """Run the jobs of :data:`TOTALS` through a Consumer, then stop it."""
    echomq.add_many(conn, queue, [{"do": "ok"}, {"do": "ok"}, {"do": "cancel"}])
    echomq.add(conn, queue, {"do": "fail"}, max_attempts=2)
    consumers.run_until(conn, queue, handler, lambda: echomq.counts(conn, queue).dead == 1
                        and echomq.counts(conn, queue).completed == 3)


def status(server_url: str, executor: str, queue: str, *flags: str) -> str:
    done = CliRunner().invoke(main, ["--url", server_url, "--executor", executor,
                                     "status", "--queue", queue, *flags])
    assert done.exit_code == 0, done.output
    return done.output


def test_status_after_a_purge_shows_the_rows_left_and_the_lifetime_totals_apart(
    conn: echomq.Connection, server_url: str, executor: str, queue: str
) -> None:
    settle_all(conn, queue)
    assert echomq.purge(conn, queue, "completed") == 3
    shown = json.loads(status(server_url, executor, queue, "--json"))
    assert (shown["completed"], shown["dead"]) == (0, 1)  # rows now
    assert {k: shown[f"{k}_total"] for k in TOTALS} == TOTALS  # ever, untouched by a purge
    assert "failed" not in shown  # no third meaning of "failed" here
    lines = status(server_url, executor, queue).splitlines()
    assert "completed: 0" in lines and "completed_total: 2" in lines


def test_the_metrics_name_each_outcome_as_status_does(
    conn: echomq.Connection, queue: str
) -> None:
    settle_all(conn, queue)
    samples = parse(render(conn)[0])
    outcomes = {dict(labels)["outcome"] for name, labels in samples
                if name == "echomq_jobs_finished_total" and ("queue", queue) in labels}
    assert outcomes == set(TOTALS)
    assert {o: value(samples, "echomq_jobs_finished_total", queue=queue, outcome=o)
            for o in TOTALS} == TOTALS
    assert echomq.metrics(conn, queue) == TOTALS


def test_the_consumer_stop_line_says_the_same(conn: echomq.Connection, queue: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="echomq.consumer"):
        settle_all(conn, queue)
    [line] = [r.getMessage() for r in caplog.records if "stopped:" in r.getMessage()]
    assert line.endswith("stopped: 2 completed, 1 cancelled, 2 failed (1 retried, 1 dead)")
