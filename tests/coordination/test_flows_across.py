"""Issue 25, flows across queues: a chain's or chord's steps on several queues (different
slots on a Cluster), the parent released exactly once through flow_ack."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import echomq
from echomq.queue.connection import Connection
from echomq.queue.flows_across import OUTBOX, deliver_outbox, repair_flow
from echomq.queue.transitions.flows import flow_ack_call
from tests.coordination.test_flows import Workers, workers  # noqa: F401 - the fixture
from tests.support.waits import wait_until


def _app(conn: Connection) -> tuple[echomq.App, str, str, dict[str, Any]]:
    """Tasks on two queues: ``double`` and ``flaky`` on A, ``report`` on B."""
    a, b = f"xa-{uuid.uuid4().hex[:8]}", f"xb-{uuid.uuid4().hex[:8]}"
    app, runs = echomq.App(conn=conn), {"report": 0}

    @app.task(queue=a, name="double")
    def double(n: int) -> int:
        return 2 * n

    @app.task(queue=a, name="flaky", max_attempts=1)
    def flaky(n: int) -> int:
        raise ValueError(f"no {n}")

    @app.task(queue=b, name="report")
    def report(results: Any, label: str = "") -> dict[str, Any]:
        runs["report"] += 1
        return {"label": label, "results": results}

    return app, a, b, {"double": double, "flaky": flaky, "report": report, "runs": runs}


def _state(conn: Connection, q: str, job_id: str) -> str:
    job = echomq.get_job(conn, q, job_id)
    return "" if job is None else job.state


def test_a_chord_and_a_chain_across_two_queues(conn: Connection, workers: Workers) -> None:
    app, a, b, t = _app(conn)
    double, report = t["double"], t["report"]
    parent = echomq.chord([double.s(n) for n in range(4)], then=report.s("sum")).enqueue(app)
    kids = echomq.children(conn, b, parent)
    assert _state(conn, b, parent) == "waiting" and len(kids) == 4
    assert all(echomq.get_job(conn, a, k).parent == parent for k in kids)
    # a chain A -> B -> A: each step's result is the next one's first argument
    chained = echomq.chain(double.s(5), double.s().set(queue=b), double.s()).enqueue(app)
    workers.start(app, [a, b])
    wait_until(lambda: _state(conn, b, parent) == "completed"
               and _state(conn, a, chained) == "completed")
    done = echomq.get_job(conn, b, parent)
    assert done.result == {"label": "sum", "results": [0, 2, 4, 6]} and done.attempts == 1
    assert t["runs"]["report"] == 1
    assert echomq.get_job(conn, a, chained).result == 40
    assert not conn.redis.exists(conn.keys(a).base + OUTBOX)
    assert not conn.redis.exists(conn.keys(b).base + f"flow:{parent}:acked")
