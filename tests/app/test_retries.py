"""Issue 22: retry rules per task and per job, ``Retry`` and ``Fail`` from a task."""

from __future__ import annotations

import pytest

import echomq
from tests.support.app_workers import Workers
from tests.support.waits import server_ms, wait_until


def scheduled_in(app: echomq.App, queue: str, job_id: str) -> float:
    """How far in the future (ms, server clock) the job's retry is scheduled."""
    keys = app.conn.keys(queue)
    score = wait_until(lambda: app.conn.redis.zscore(keys.scheduled, job_id))
    return float(score) - server_ms(app.conn.redis)


def dead(app: echomq.App, queue: str, job_id: str) -> echomq.Job:
    return wait_until(lambda: (j := echomq.get_job(app.conn, queue, job_id)).state == "dead"
                      and j)


def test_retry_with_a_delay_is_obeyed_and_uses_an_attempt(app, names, workers: Workers
                                                           ) -> None:
    queue = names("q")

    @app.task(queue=queue, name="r.later")
    def later() -> None:
        raise echomq.Retry(delay_ms=60_000)

    job_id = later.enqueue()
    workers.start(app, [queue])
    assert 50_000 < scheduled_in(app, queue, job_id) <= 60_000
    row = echomq.get_job(app.conn, queue, job_id)
    assert (row.state, row.attempts) == ("scheduled", 1)


def test_fail_is_dead_at_once_whatever_tries_remain(app, names, workers) -> None:
    queue = names("q")

    @app.task(queue=queue, name="r.fail", max_attempts=10)
    def hopeless(to: str) -> None:
        raise echomq.Fail(f"bad address {to}")

    job_id = hopeless.enqueue("x")
    workers.start(app, [queue])
    row = dead(app, queue, job_id)
    assert row.attempts == 1 and "Fail: bad address x" in row.last_error


def test_dont_retry_on_and_retry_on_choose_what_retries(app, names, workers) -> None:
    queue = names("q")

    @app.task(queue=queue, name="r.value", max_attempts=5, dont_retry_on=(ValueError,),
              backoff=echomq.Fixed(60_000))
    def value() -> None:
        raise ValueError("never again")

    @app.task(queue=queue, name="r.only_io", max_attempts=5, retry_on=(OSError,),
              backoff=echomq.Fixed(60_000))
    def only_io(kind: str) -> None:
        raise OSError("try later") if kind == "io" else KeyError(kind)

    value_id, key_id, io_id = value.enqueue(), only_io.enqueue("key"), only_io.enqueue("io")
    workers.start(app, [queue])
    assert dead(app, queue, value_id).attempts == 1
    assert dead(app, queue, key_id).attempts == 1
    assert 50_000 < scheduled_in(app, queue, io_id) <= 60_000


def test_backoff_policies_exponential_jittered_fixed_and_a_function(app, names, workers
                                                                    ) -> None:
    queue = names("q")
    seen: list[tuple[int, str]] = []

    @app.task(queue=queue, name="b.exp", backoff=echomq.Backoff(base_ms=40_000,
                                                                cap_ms=50_000, jitter=False))
    def exp() -> None:
        raise RuntimeError("x")

    @app.task(queue=queue, name="b.jitter", backoff=echomq.Backoff(base_ms=40_000,
                                                                   cap_ms=50_000))
    def jittered(n: int) -> None:
        raise RuntimeError("x")

    def delay(attempt: int, exc: BaseException) -> int:
        seen.append((attempt, type(exc).__name__))
        return 30_000 + attempt

    @app.task(queue=queue, name="b.func", backoff=delay)
    def func() -> None:
        raise LookupError("x")

    exp_id, func_id = exp.enqueue(), func.enqueue()
    jitter_ids = jittered.enqueue_many([(i,) for i in range(8)])
    workers.start(app, [queue])
    assert 38_000 < scheduled_in(app, queue, exp_id) <= 40_000
    assert 28_000 < scheduled_in(app, queue, func_id) <= 30_001
    assert seen == [(1, "LookupError")]
    spread = [scheduled_in(app, queue, i) for i in jitter_ids]
    assert all(-1_000 < d <= 40_000 for d in spread)
    assert max(spread) - min(spread) > 1_000  # full jitter: not all the same delay


def test_a_per_job_backoff_and_tries_override_the_task(app, names, workers) -> None:
    queue = names("q")

    @app.task(queue=queue, name="p.job", max_attempts=1, backoff=echomq.Fixed(1))
    def flaky() -> None:
        raise RuntimeError("again")

    job_id = flaky.enqueue_with(max_attempts=3, backoff=echomq.Fixed(45_000))
    workers.start(app, [queue])
    assert 40_000 < scheduled_in(app, queue, job_id) <= 45_000
    with pytest.raises(echomq.InvalidArgument, match="a function cannot travel"):
        flaky.enqueue_with(backoff=lambda attempt, exc: 1)


def test_a_plain_consumer_obeys_retry_and_fail_too(conn, names) -> None:
    from tests.support.consumers import run_until

    queue = names("q")
    retry_id = echomq.add(conn, queue, {"do": "retry"}, max_attempts=3)
    fail_id = echomq.add(conn, queue, {"do": "fail"}, max_attempts=3)

    def handler(job: echomq.JobContext) -> None:
        if job.payload["do"] == "retry":
            raise echomq.Retry(delay_ms=60_000)
        raise echomq.Fail("no")

    run_until(conn, queue, handler,
              lambda: echomq.get_job(conn, queue, fail_id).state == "dead"
              and echomq.get_job(conn, queue, retry_id).state == "scheduled")
    keys = conn.keys(queue)
    assert float(conn.redis.zscore(keys.scheduled, retry_id)) - server_ms(conn.redis) > 50_000
    assert echomq.get_job(conn, queue, fail_id).attempts == 1


def test_the_job_context_carries_what_a_task_needs(app, names, workers) -> None:
    queue = names("q")
    seen: dict[str, object] = {}

    @app.task(queue=queue, name="ctx.look", max_attempts=4)
    def look(a: int, b: str = "") -> None:
        job = echomq.current_job()
        assert job is not None
        seen.update(id=job.id, name=job.name, queue=job.queue, attempts=job.attempts,
                    max_attempts=job.max_attempts, created_at=job.created_at,
                    payload=job.payload)

    job_id = look.enqueue(1, b="x")
    before = server_ms(app.conn.redis)
    workers.start(app, [queue])
    wait_until(lambda: seen)
    created = seen.pop("created_at")
    assert isinstance(created, int) and abs(created - before) < 10_000
    assert seen == {"id": job_id, "name": "ctx.look", "queue": queue, "attempts": 1,
                    "max_attempts": 4, "payload": {"args": [1], "kwargs": {"b": "x"}}}
