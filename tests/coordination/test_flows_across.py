"""Issue 25, flows across queues: a chain's or chord's steps on several queues (different
slots on a Cluster), the parent released exactly once through flow_ack."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import echomq
from echomq.queue.connection import Connection, connect
from echomq.queue.transitions.flows import flow_ack_call
from echomq.scheduling.scheduler import BatchScheduler
from tests.coordination.test_flows import ROOT, Workers
from tests.support import flow_tasks
from tests.support.waits import wait_until


@pytest.fixture
def workers() -> Iterator[Workers]:
    found = Workers()
    yield found
    found.stop_all()


@pytest.fixture
def functions(server_url: str) -> Iterator[Connection]:
    """A connection on the functions executor (closed after the workers stopped)."""
    conn = connect(server_url, "functions")
    yield conn
    conn.close()


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
    assert not conn.redis.exists(conn.keys(a).flow_outbox)
    assert not conn.redis.exists(conn.keys(b).flow_acked(parent))


def test_a_failing_child_across_queues_under_both_policies(conn: Connection,
                                                           workers: Workers) -> None:
    app, a, b, t = _app(conn)
    double, flaky, report = t["double"], t["flaky"], t["report"]
    failing = echomq.chord([double.s(1), flaky.s(2)], then=report.s("f")).enqueue(app)
    ignoring = echomq.chord([double.s(1), flaky.s(2), double.s(3)], then=report.s("i"),
                            on_child_failure="ignore").enqueue(app)
    # a chain A -> B -> A whose first step dies: the death travels through both acks
    last = echomq.chain(flaky.s(1), double.s().set(queue=b), double.s()).enqueue(app)
    workers.start(app, [a, b])
    wait_until(lambda: _state(conn, b, ignoring) == "completed"
               and _state(conn, b, failing) == "dead" and _state(conn, a, last) == "dead")
    assert echomq.get_job(conn, b, ignoring).result == {"label": "i",
                                                        "results": [2, None, 6]}
    dead = echomq.get_job(conn, b, failing)
    child = echomq.children(conn, b, failing)[1]
    assert dead.last_error.startswith(f"child {child} failed: ") and "no 2" in dead.last_error
    assert dead.attempts == 0 and t["runs"]["report"] == 1
    [middle] = echomq.children(conn, a, last)
    assert _state(conn, b, middle) == "dead"
    assert echomq.get_job(conn, a, last).last_error.startswith(f"child {middle} failed")


def test_an_undelivered_outcome_is_delivered_once_by_the_fallback(
        conn: Connection, workers: Workers) -> None:
    """The last child settled (its outcome in the outbox) by a worker that died before
    delivering: here the settle is the library's verb, which delivers nothing. A worker
    of the child's queue delivers it on its beat; the parent is released once, and a
    repeated flow_ack changes nothing."""
    app, a, b, t = _app(conn)
    parent = echomq.chord([t["double"].s(1), t["double"].s(2)],
                          then=t["report"].s("late")).enqueue(app)
    held = echomq.claim(conn, a, lease_ms=60_000, count=10)
    for job in held:
        echomq.complete(conn, a, job.id, job.token, 2 * job.payload["args"][0])
    assert conn.redis.hlen(conn.keys(a).flow_outbox) == 2
    assert _state(conn, b, parent) == "waiting"
    workers.start(app, [a], beat_ms=50)  # nothing to run on A: only its beat delivers
    wait_until(lambda: _state(conn, b, parent) == "pending")
    wait_until(lambda: not conn.redis.exists(conn.keys(a).flow_outbox))
    assert echomq.get_job(conn, b, parent).payload == {"args": [[2, 4], "late"],
                                                       "kwargs": {}}
    # the same ack again (a deliverer that died before deleting the entry): a no-op
    again = flow_ack_call(conn.keys(b), parent, a, held[0].id, 1, True, "99")
    assert conn.executor.run(*again) == 0
    assert echomq.deliver_outbox(conn, a) == 0
    workers.start(app, [b])
    wait_until(lambda: _state(conn, b, parent) == "completed")
    assert echomq.get_job(conn, b, parent).result == {"label": "late", "results": [2, 4]}
    assert t["runs"]["report"] == 1


def test_a_producer_dying_between_the_adds_is_repaired(
        conn: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent's add went through and the children's did not: ``repair_flow`` adds
    them again (once: a second repair adds nothing)."""
    from echomq.queue import flows_across

    app, a, b, t = _app(conn)
    real, calls = flows_across.add_flow, []

    def dies_after_the_first(*args: Any) -> list[str]:
        calls.append(args)
        if len(calls) > 1:
            raise SystemExit("producer killed")
        return real(*args)

    monkeypatch.setattr(flows_across, "add_flow", dies_after_the_first)
    with pytest.raises(SystemExit):
        echomq.chord([t["double"].s(1), t["double"].s(2)], then=t["report"].s()).enqueue(app)
    monkeypatch.undo()
    [parent] = conn.redis.zrange(conn.keys(b).waiting, 0, -1)
    kids = echomq.children(conn, b, parent)
    assert echomq.counts(conn, a).pending == 0
    assert echomq.repair_flow(conn, b, parent) == kids
    assert echomq.repair_flow(conn, b, parent) == []
    assert [echomq.get_job(conn, a, k).parent for k in kids] == [parent, parent]
    # settled without a worker: the scheduler's sweep of A delivers their outcomes
    for job in echomq.claim(conn, a, lease_ms=60_000, count=10):
        echomq.complete(conn, a, job.id, job.token, job.payload["args"][0])
    BatchScheduler(conn).sweep_once(a, 1, 100)
    assert echomq.get_job(conn, b, parent).payload == {"args": [[1, 2]], "kwargs": {}}


def test_a_group_across_queues_is_refused_before_the_wire(conn: Connection) -> None:
    app, a, b, t = _app(conn)
    with pytest.raises(echomq.InvalidArgument, match="a group's jobs must share one queue"):
        echomq.group([t["double"].s(1), t["report"].s(2)]).enqueue(app)
    assert echomq.counts(conn, a).pending == echomq.counts(conn, b).pending == 0


def test_a_worker_dying_between_its_settle_and_the_delivery(
        functions: Connection, workers: Workers, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker process exits at once (no cleanup, as kill -9) right after settling the
    first of the chord's children on A, before delivering; another worker of A delivers
    on its beat and the parent on B runs once. (A process costs a second or two: one
    executor here, both in the tests above.)"""
    conn = functions
    a, b, marks = f"xa-{uuid.uuid4().hex[:8]}", f"xb-{uuid.uuid4().hex[:8]}", tmp_path / "m"
    app = flow_tasks.app
    app.adopt(conn)
    kids = [flow_tasks.double.s(n).set(queue=a) for n in (1, 2)]
    parent = echomq.chord(kids, then=flow_tasks.report.s().set(queue=b)).enqueue(app)
    env = {**os.environ, "EMQ_TEST_QUEUE": a, "EMQ_TEST_MARKS": str(marks),
           "EMQ_TEST_DIE_BEFORE_ACK": "1", "PYTHONPATH": str(ROOT)}
    dying = subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", conn.url, "--executor", conn.executor_name,
         "worker", "tests.support.flow_tasks:app", "-q", a, "-c", "1", "--prefetch", "0",
         "--lease", "2s"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        assert dying.wait(30) == 9
    finally:
        dying.kill()
    # the first child settled, its outcome undelivered; the second pending, or claimed
    # and back when its lease lapses
    assert conn.redis.hlen(conn.keys(a).flow_outbox) >= 1
    assert _state(conn, b, parent) == "waiting"
    monkeypatch.setattr(flow_tasks, "MARKS", marks)
    workers.start(app, [a, b], beat_ms=50)
    wait_until(lambda: _state(conn, b, parent) == "completed", timeout=30)
    assert echomq.get_job(conn, b, parent).result == [2, 4]
    assert marks.read_text().split().count("report") == 1
