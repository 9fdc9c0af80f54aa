"""Issue 22: an App of tasks, routed by name to one worker over many queues."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import echomq
from tests.support.app_workers import Workers
from tests.support.waits import wait_until


def test_each_job_runs_the_task_its_name_registers(app, names, workers: Workers) -> None:
    mail, reports = names("mail"), names("reports")

    @app.task(queue=mail)
    def send(to: str, subject: str = "") -> dict[str, Any]:
        job = echomq.current_job()
        assert job is not None
        return {"to": to, "subject": subject, "task": job.name, "queue": job.queue}

    @app.task(queue=reports, name="reports.build")
    def build(n: int) -> int:
        return n * 2

    sent = send.enqueue("a@b", subject="hi")
    built = build.enqueue(21)
    many = send.enqueue_many([("c@d",), {"to": "e@f", "subject": "kw"}])
    workers.start(app, [mail, reports])
    wait_until(lambda: echomq.counts(app.conn, mail).completed == 3
               and echomq.counts(app.conn, reports).completed == 1)

    assert send.name == f"{__name__}.test_each_job_runs_the_task_its_name_registers." \
                        "<locals>.send"
    assert echomq.get_job(app.conn, mail, sent).result == {
        "to": "a@b", "subject": "hi", "task": send.name, "queue": mail}
    assert echomq.get_job(app.conn, reports, built).result == 42
    assert [echomq.get_job(app.conn, mail, i).result["to"] for i in many] == ["c@d", "e@f"]
    row = echomq.get_job(app.conn, mail, sent)
    assert row.name == send.name and row.payload == {"args": ["a@b"],
                                                     "kwargs": {"subject": "hi"}}


def test_a_producer_in_another_language_reaches_a_task_by_name(app, names, workers) -> None:
    queue = names("mail")

    @app.task(queue=queue, name="mail.send")
    def send(to: str, subject: str = "") -> str:
        return f"{to}/{subject}"

    # what a Node or Go producer sends: the name and {"args": [...], "kwargs": {...}}
    job_id = echomq.add(app.conn, queue, {"args": ["a@b"], "kwargs": {"subject": "x"}},
                        name="mail.send")
    workers.start(app, [queue])
    wait_until(lambda: echomq.get_job(app.conn, queue, job_id).state == "completed")
    assert echomq.get_job(app.conn, queue, job_id).result == "a@b/x"


def test_a_plain_call_runs_here_and_current_job_is_none_outside_a_task(app) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5
    assert echomq.current_job() is None


def test_a_name_no_worker_knows_waits_for_one_that_does(conn, names, workers) -> None:
    """A rolling deploy: the producer is ahead of the old worker, which fails the job
    with the names it knows; it is retried, and the new worker runs it."""
    queue = names("mail")
    old, new = echomq.App(conn=conn), echomq.App(conn=conn)

    @old.task(queue=queue, name="mail.send")
    def send_v1(to: str) -> str:
        return "v1"

    @new.task(queue=queue, name="mail.send_digest")
    def digest(to: str) -> str:
        return "digest " + to

    job_id = digest.enqueue_with(args=("a@b",), max_attempts=5)
    workers.start(old, [queue], backoff_ms=300, backoff_cap_ms=300)
    row = wait_until(lambda: (j := echomq.get_job(conn, queue, job_id)).last_error and j)
    assert row.state in ("scheduled", "pending")
    assert "unknown task 'mail.send_digest' (this worker knows: mail.send)" in row.last_error
    workers.stop_all()
    workers.start(new, [queue])
    done = wait_until(lambda: (j := echomq.get_job(conn, queue, job_id)).state
                      == "completed" and j)
    assert done.result == "digest a@b" and done.attempts >= 2


def test_a_payload_that_is_not_a_task_call_is_dead_at_once(app, names, workers) -> None:
    queue = names("mail")

    @app.task(queue=queue, name="mail.send")
    def send(to: str) -> str:
        return to

    job_id = echomq.add(app.conn, queue, ["not", "a", "call"], name="mail.send",
                        max_attempts=5)
    workers.start(app, [queue])
    row = wait_until(lambda: (j := echomq.get_job(app.conn, queue, job_id)).state
                     == "dead" and j)
    assert row.attempts == 1 and "is not a task call" in row.last_error


def test_strict_priority_runs_every_high_job_before_any_low_one(app, names, workers) -> None:
    high, low = names("high"), names("low")
    ran: list[str] = []

    @app.task(queue=high, name="t.high")
    def on_high(n: int) -> None:
        ran.append("high")

    @app.task(queue=low, name="t.low")
    def on_low(n: int) -> None:
        ran.append("low")

    on_low.enqueue_many([(i,) for i in range(40)])
    on_high.enqueue_many([(i,) for i in range(120)])
    workers.start(app, [high, low], concurrency=1, batch_size=10)
    wait_until(lambda: len(ran) == 160)
    assert ran == ["high"] * 120 + ["low"] * 40


def test_weighted_queues_share_claims_by_weight_under_a_backlog(app, names, workers) -> None:
    high, low = names("high"), names("low")
    ran: list[str] = []

    @app.task(queue=high, name="w.high")
    def on_high(n: int) -> None:
        ran.append("high")

    @app.task(queue=low, name="w.low")
    def on_low(n: int) -> None:
        ran.append("low")

    on_high.enqueue_many([(i,) for i in range(400)])
    on_low.enqueue_many([(i,) for i in range(400)])
    workers.start(app, f"{high}:5,{low}:1", concurrency=1, prefetch=0, batch_size=1)
    wait_until(lambda: len(ran) >= 300, timeout=30)
    first = ran[:300]
    share = first.count("high") / len(first)
    assert 0.75 <= share <= 0.92, share  # about 5 of 6
    assert first.count("low") > 0  # the light queue is never starved


def test_the_worker_logs_its_start_and_each_finished_job(app, names, workers, caplog) -> None:
    queue = names("mail")

    @app.task(queue=queue, name="log.ok")
    def ok() -> str:
        return "fine"

    @app.task(queue=queue, name="log.bad", max_attempts=1)
    def bad() -> None:
        raise RuntimeError("it broke")

    caplog.set_level(logging.INFO, logger="echomq.worker")
    ok_id, bad_id = ok.enqueue(), bad.enqueue()
    workers.start(app, [queue])
    wait_until(lambda: echomq.counts(app.conn, queue).completed == 1
               and echomq.counts(app.conn, queue).dead == 1)
    workers.stop_all()
    lines = [r.getMessage() for r in caplog.records if r.name == "echomq.worker"]
    assert any(line.startswith("worker at ") and f"queues {queue} (strict order)" in line
               and "tasks: log.bad, log.ok" in line for line in lines), lines
    assert any(line.startswith(f"log.ok {queue}/{ok_id} attempt 1 completed in ")
               for line in lines), lines
    assert any(line.startswith(f"log.bad {queue}/{bad_id} attempt 1 dead in ")
               and line.endswith("RuntimeError: it broke") for line in lines), lines
    assert not any(app.conn.url in line for line in lines if "://" in app.conn.url
                   and "@" in app.conn.url)


@pytest.mark.parametrize("make, message", [
    (lambda app: app.task(42), "must be callable"),
    (lambda app: app.task(queue="bad:name")(print), "queue"),
    (lambda app: app.task(backoff=1000)(print), "backoff must be an echomq.Backoff"),
    (lambda app: app.task(retry_on=ValueError())(print), "retry_on must be a tuple"),
    (lambda app: app.task(max_attempts=0)(print), "max_attempts"),
])
def test_bad_task_definitions_are_refused(app, make, message) -> None:
    with pytest.raises((echomq.InvalidArgument, echomq.InvalidKey), match=message):
        make(app)


def test_a_name_registered_twice_is_refused(app) -> None:
    @app.task(name="dup")
    def one() -> None: ...

    with pytest.raises(echomq.InvalidArgument, match="'dup' is registered twice"):
        @app.task(name="dup")
        def two() -> None: ...


def test_arguments_that_are_not_json_are_refused_before_the_wire(app, names) -> None:
    queue = names("mail")

    @app.task(queue=queue, name="j.send")
    def send(value: Any) -> None: ...

    with pytest.raises(echomq.InvalidArgument, match="task 'j.send': arguments are not JSON"):
        send.enqueue(object())
    with pytest.raises(echomq.InvalidArgument, match="task 'j.send': arguments are not JSON"):
        send.enqueue_many([(1,), (float("nan"),)])
    assert echomq.counts(app.conn, queue).pending == 0


@pytest.mark.parametrize("spec, message", [
    ([], "at least one queue"),
    ("a,a", "named twice"),
    ("a:5,b", "give every queue a weight or none"),
    ("a:0,b:1", "between 1 and"),
    ("a:x", "':' is not allowed in a queue name"),
])
def test_bad_queue_specs_are_refused(app, spec, message) -> None:
    @app.task(queue="q")
    def t() -> None: ...

    with pytest.raises((echomq.InvalidArgument, echomq.InvalidKey), match=message):
        app.worker(spec)


def test_the_payload_shape_is_the_documented_one(app, names) -> None:
    queue = names("mail")

    @app.task(queue=queue, name="shape.send")
    def send(to: str, subject: str = "") -> None: ...

    job_id = send.enqueue_with(args=["a@b"], kwargs={"subject": "x"}, delay_ms=60_000,
                               priority=3, job_id="welcome-1")
    assert job_id == "welcome-1"
    assert send.enqueue_with(args=["other"], job_id="welcome-1") == "welcome-1"
    row = echomq.get_job(app.conn, queue, job_id)
    assert json.loads(row.raw["payload"]) == {"args": ["a@b"], "kwargs": {"subject": "x"}}
    assert (row.name, row.state, row.priority) == ("shape.send", "scheduled", 3)
