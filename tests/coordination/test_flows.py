"""Issue 25, flows: chain, group, chord over task signatures, exactly once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import echomq
from echomq.queue.connection import Connection, connect
from echomq.servers.valkey import EmbeddedValkey
from tests.support import flow_tasks
from tests.support.app_workers import Workers
from tests.support.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]



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


def _chord_app(conn: Connection, queue: str) -> tuple[echomq.App, Any, Any, Any]:
    app = echomq.App(conn=conn)

    @app.task(queue=queue, name="double")
    def double(n: int) -> int:
        return 2 * n

    @app.task(queue=queue, name="flaky", max_attempts=1)
    def flaky(n: int) -> int:
        raise ValueError(f"no {n}")

    @app.task(queue=queue, name="report")
    def report(results: list[Any], label: str) -> dict[str, Any]:
        return {"label": label, "results": results}

    return app, double, flaky, report


def test_a_group_adds_all_at_once_and_a_chord_gets_the_results_in_order(
        conn: Connection, flowq: str, workers: Workers) -> None:
    app, double, _, report = _chord_app(conn, flowq)
    ids = echomq.group([double.s(n) for n in range(3)]).enqueue(app)
    parent = echomq.chord([double.s(n) for n in range(5)], then=report.s("sum")).enqueue(app)
    assert echomq.counts(conn, flowq).waiting == 1
    kids = echomq.children(conn, flowq, parent)
    assert len(kids) == 5 and echomq.get_job(conn, flowq, kids[0]).parent == parent
    workers.start(app, [flowq])
    wait_until(lambda: echomq.get_job(conn, flowq, parent).state == "completed")
    assert echomq.get_job(conn, flowq, parent).result == {"label": "sum",
                                                          "results": [0, 2, 4, 6, 8]}
    assert [echomq.get_job(conn, flowq, i).result for i in ids] == [0, 2, 4]
    assert echomq.get_job(conn, flowq, parent).attempts == 1
    # the results were read into the parent's call, and the hash freed
    assert not conn.redis.exists(conn.keys(flowq).base + f"flow:{parent}")
    assert echomq.counts(conn, flowq).waiting == 0


def test_a_failing_child_dead_letters_the_parent_or_gives_none(
        conn: Connection, flowq: str, workers: Workers) -> None:
    app, double, flaky, report = _chord_app(conn, flowq)
    failing = echomq.chord([double.s(1), flaky.s(2)], then=report.s("f")).enqueue(app)
    ignoring = echomq.chord([double.s(1), flaky.s(2), double.s(3)], then=report.s("i"),
                            on_child_failure="ignore").enqueue(app)
    workers.start(app, [flowq])
    wait_until(lambda: echomq.get_job(conn, flowq, ignoring).state == "completed"
               and echomq.get_job(conn, flowq, failing).state == "dead")
    assert echomq.get_job(conn, flowq, ignoring).result == {"label": "i",
                                                            "results": [2, None, 6]}
    dead = echomq.get_job(conn, flowq, failing)
    child = echomq.children(conn, flowq, failing)[1]
    assert dead.last_error.startswith(f"child {child} failed: ") and "no 2" in dead.last_error
    assert dead.attempts == 0  # never ran
    # a chain whose first step dies dead-letters every later step
    last = echomq.chain(flaky.s(1), double.s(), double.s()).enqueue(app)
    wait_until(lambda: echomq.get_job(conn, flowq, last).state == "dead")
    middle = echomq.get_job(conn, flowq, last).children[0]
    assert echomq.get_job(conn, flowq, last).last_error.startswith(f"child {middle} failed")


def test_bad_flows_are_refused_before_the_wire(conn: Connection, flowq: str) -> None:
    app, double, _, report = _chord_app(conn, flowq)
    other = echomq.App(conn=conn)

    @other.task(queue=flowq, name="elsewhere")
    def elsewhere() -> None: ...

    cases: list[tuple[Any, str]] = [
        (lambda: echomq.chain(), "a chain needs at least one step"),
        (lambda: echomq.group([]), "a group needs at least one signature"),
        (lambda: echomq.chord([], then=report.s()), "a chord needs at least one child"),
        (lambda: echomq.chord([double.s(1)], then=report), "then must be a Signature"),
        (lambda: echomq.chord([double.s(1)], then=report.s(), on_child_failure="skip"),
         'on_child_failure must be "fail" or "ignore"'),
        (lambda: echomq.chain(double.s(1), elsewhere.s()).enqueue(app),
         "task 'elsewhere' is not registered with this App"),
        (lambda: echomq.group([double.s(1), "x"]).enqueue(app), "must be a Signature"),
        (lambda: echomq.group([double.s(1), double.s().set(queue="q2")]).enqueue(app),
         "a group's jobs must share one queue"),
        (lambda: echomq.group([double.s(object())]).enqueue(app), "arguments are not JSON"),
    ]
    for make, message in cases:
        with pytest.raises(echomq.InvalidArgument, match=message.replace("(", r"\(")):
            make()
    assert echomq.counts(conn, flowq) == echomq.Counts(0, 0, 0, 0, 0)


def _worker(url: str, executor: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", url, "--executor", executor, "worker",
         "tests.support.flow_tasks:app", "-q", env["EMQ_TEST_QUEUE"], "--lease", "1s"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)


def test_kill_9_of_the_last_childs_worker_and_a_restart_still_run_the_parent_once(
        private_server: EmbeddedValkey, executor: str, tmp_path: Path) -> None:
    """The worker running the chord's last child is killed (kill -9), the server is
    killed and restarted from its AOF; a new worker runs the child again, and the
    parent runs once, with every result."""
    queue, marks = f"flows-{uuid.uuid4().hex[:8]}", tmp_path / "marks"
    env = {**os.environ, "EMQ_TEST_QUEUE": queue, "EMQ_TEST_MARKS": str(marks),
           "PYTHONPATH": str(ROOT)}
    app = flow_tasks.app
    conn = connect(private_server.url, executor)
    app.adopt(conn)
    sigs = [flow_tasks.double.s(1), flow_tasks.double.s(2), flow_tasks.slow.s(3)]
    sigs = [sig.set(queue=queue) for sig in sigs]
    parent = echomq.chord(sigs, then=flow_tasks.report.s().set(queue=queue)).enqueue(app)
    first = _worker(private_server.url, executor, env)
    try:
        wait_until(lambda: marks.exists() and "slow" in marks.read_text()
                   and echomq.counts(conn, queue).completed == 2, timeout=20)
        first.kill()  # kill -9 mid-run of the last child
        first.wait(10)
    finally:
        first.kill()
    conn.close()
    private_server.restart(hard=True)  # AOF, fsync always
    conn = connect(private_server.url, executor)
    app.adopt(conn)
    assert echomq.get_job(conn, queue, parent).state == "waiting"
    second = _worker(private_server.url, executor, env)
    try:
        wait_until(lambda: echomq.get_job(conn, queue, parent).state == "completed",
                   timeout=30)
    finally:
        second.terminate()
        second.wait(20)
    done = echomq.get_job(conn, queue, parent)
    assert done.result == [2, 4, 6] and done.attempts == 1
    runs = marks.read_text().split()
    # the killed run and at least one more (a 1 s lease on a loaded machine may lapse
    # once more before its settle: at least once); the parent exactly once
    assert runs.count("slow") >= 2 and runs.count("report") == 1
    app.close()


def test_the_archive_and_emq_show_keep_a_whole_flow(conn: Connection, flowq: str,
                                                    workers: Workers, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from echomq.cli import main

    app, double, flaky, report = _chord_app(conn, flowq)
    echomq.archive.declare(conn, flowq)
    parent = echomq.chord([double.s(1), flaky.s(2)], then=report.s("a"),
                          on_child_failure="ignore").enqueue(app)
    kids = echomq.children(conn, flowq, parent)
    workers.start(app, [flowq])
    wait_until(lambda: echomq.get_job(conn, flowq, parent).state == "completed")

    def emq(*args: str) -> Any:
        result = CliRunner().invoke(main, ["--url", conn.url, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    assert json.loads(emq("show", "-q", flowq, parent, "--json"))["children"] == kids
    assert json.loads(emq("show", "-q", flowq, kids[1], "--json"))["parent"] == parent
    assert f"children: {kids[0]}, {kids[1]}" in emq("show", "-q", flowq, parent)
    from starlette.testclient import TestClient

    from echomq.web import create_app

    web = TestClient(create_app(conn))
    page = web.get("/job", params={"queue": flowq, "job": parent}).text
    links = re.search(r'id="flow-children">(.*?)</td>', page, re.S)
    assert links and re.findall(r'job=([^"&]+)"', links.group(1)) == kids
    page = web.get("/job", params={"queue": flowq, "job": kids[0]}).text
    assert re.search(rf'id="flow-parent"><a href="[^"]*job={parent}"', page)
    floor = tmp_path / "floor"
    with echomq.archive.Driver(conn, floor, claim_custody=True) as driver:
        driver.fold(flowq)
    echomq.obliterate(conn, flowq)  # Redis forgets the flow; the floor keeps it
    shown = json.loads(emq("archive", "show", flowq, parent, "--json", "--floor", str(floor)))
    assert shown["children"] == kids and shown["outcome"] == "completed"
    for kid, outcome in zip(kids, ("completed", "dead"), strict=True):
        row = json.loads(emq("archive", "show", flowq, kid, "--json", "--floor", str(floor)))
        assert (row["parent"], row["outcome"]) == (parent, outcome)


def test_a_child_cancelled_or_removed_before_it_ran_counts_as_failed(
        conn: Connection, flowq: str) -> None:
    app, double, _, report = _chord_app(conn, flowq)
    failing = echomq.chord([double.s(1), double.s(2)], then=report.s("f")).enqueue(app)
    ignoring = echomq.chord([double.s(1), double.s(2)], then=report.s("i"),
                            on_child_failure="ignore").enqueue(app)
    one, _ = echomq.children(conn, flowq, failing)
    echomq.cancel.request(conn, flowq, one)
    assert echomq.get_job(conn, flowq, failing).last_error == f"child {one} failed: cancelled"
    first, second = echomq.children(conn, flowq, ignoring)
    echomq.remove_job(conn, flowq, first)
    assert echomq.get_job(conn, flowq, ignoring).state == "waiting"
    echomq.cancel.request(conn, flowq, second)
    parent = echomq.get_job(conn, flowq, ignoring)
    assert parent.state == "pending"
    assert parent.payload == {"args": [[None, None], "i"], "kwargs": {}}
    # a waiting parent is removed with its results; its child runs on, parentless
    waiting = echomq.chord([double.s(1)], then=report.s("w")).enqueue(app)
    [kid] = echomq.children(conn, flowq, waiting)
    echomq.remove_job(conn, flowq, waiting)
    assert echomq.get_job(conn, flowq, waiting) is None
    assert echomq.counts(conn, flowq).waiting == 0
    echomq.remove_job(conn, flowq, kid)  # its settle finds no parent: nothing changes
    assert echomq.counts(conn, flowq).dead == 1  # the first parent only
