"""Rate limits through the public API: the server's own claim times (each row's
``claimed_at``) show that no window of ``per_ms`` ever holds more than ``max_jobs``
starts, across worker processes racing, per queue and per group independently; a
handler's ``RateLimited`` hands its job back uncounted and holds back its queue (or its
group); a limited claim loop sleeps instead of polling; bad input is refused before the
wire. Run on both passes (plain and Cluster) and both executors."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import echomq
from echomq.cli import main
from echomq.queue.connection import Connection
from tests.support import ROOT
from tests.support.app_workers import QUICK
from tests.support.consumers import ConsumerThreads
from tests.support.waits import wait_until


def starts(conn: Connection, queue: str, ids: list[str]) -> list[int]:
    """The server's claim time (ms) of each job, sorted."""
    pipe = conn.redis.pipeline(transaction=False)
    keys = conn.keys(queue)
    for job_id in ids:
        pipe.hget(keys.job(job_id), "claimed_at")
    return sorted(int(t) for t in pipe.execute())


def busiest_window(times: list[int], per_ms: int) -> int:
    """The most starts in any window [t, t + per_ms) of the server's milliseconds."""
    best, first = 0, 0
    for last, at in enumerate(times):
        while times[first] <= at - per_ms:
            first += 1
        best = max(best, last - first + 1)
    return best


def utilization(times: list[int], max_jobs: int, per_ms: int) -> float:
    """The share of the allowed starts that happened: a start frees its slot per_ms later,
    so under a backlog start i follows start i - max_jobs by per_ms at best; the window
    over the mean of those gaps (the workers' start-up stagger does not count)."""
    gaps = [times[i] - times[i - max_jobs] for i in range(max_jobs, len(times))]
    return per_ms / (sum(gaps) / len(gaps))


@pytest.fixture
def consumers(conn: Connection, queue: str) -> Iterator[ConsumerThreads]:
    threads = ConsumerThreads(conn, queue, **QUICK)
    yield threads
    threads.stop_all()


def test_three_worker_processes_never_start_more_than_the_limit_per_window(
        server_url: str, queue: str) -> None:
    # one executor per pass keeps this test to two runs: scripts on the plain server,
    # functions on the Cluster (the in-process tests below take both on both)
    probe = echomq.connect(server_url)
    executor = "functions" if probe.cluster else "scripts"
    conn = echomq.connect(server_url, executor=executor)  # type: ignore[arg-type]
    max_jobs, per_ms, total = 100, 1000, 200  # two windows of starts
    echomq.set_rate_limit(conn, queue, max_jobs, per_ms)
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(total)])
    procs = [subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", server_url, "--executor", executor,
         "--log-level", "WARNING", "worker", "tests.coordination.rate_handlers:quick",
         "--queue", queue, "--concurrency", "8", "--grace", "1s"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT) for _ in range(3)]
    try:
        wait_until(lambda: echomq.counts(conn, queue).completed == total, timeout=30)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(15)
    times = starts(conn, queue, ids)
    assert busiest_window(times, per_ms) <= max_jobs
    # >= 95% of the allowed starts happen (each window's reopening waits for a worker to
    # wake and claim: a lag the sliding window carries on, so long windows keep it small)
    assert utilization(times, max_jobs, per_ms) >= 0.95, sorted(
        {(t - times[0], times.count(t)) for t in times})


def test_group_limits_hold_each_group_alone_and_ungrouped_jobs_flow(
        conn: Connection, queue: str, consumers: ConsumerThreads) -> None:
    per_ms = 300
    for group, max_jobs in (("a", 4), ("b", 8)):
        echomq.set_group_limit(conn, queue, group, 100)  # concurrency is not the limit here
        echomq.set_rate_limit(conn, queue, max_jobs, per_ms, group=group)
    a = echomq.add_many(conn, queue, [{"n": i} for i in range(12)], group="a")
    b = echomq.add_many(conn, queue, [{"n": i} for i in range(24)], group="b")
    free = echomq.add_many(conn, queue, [{"n": i} for i in range(30)])
    assert [(lim.group, lim.max_jobs) for lim in echomq.rate_limits(conn, queue)] == [
        ("a", 4), ("b", 8)]
    consumers.start(lambda job: None, concurrency=8)
    wait_until(lambda: echomq.counts(conn, queue).completed == 66)
    ta, tb, tf = starts(conn, queue, a), starts(conn, queue, b), starts(conn, queue, free)
    assert busiest_window(ta, per_ms) <= 4 and busiest_window(tb, per_ms) <= 8
    # each group runs at its own pace, three windows each: b is not held to a's limit
    assert ta[-1] - ta[0] >= 2 * per_ms and tb[-1] - tb[0] >= 2 * per_ms
    assert busiest_window(tb, per_ms) == 8
    assert tf[-1] - tf[0] < per_ms  # ungrouped jobs are held by neither


def test_a_handlers_rate_limited_hands_the_job_back_uncounted_and_the_queue_waits(
        conn: Connection, queue: str, consumers: ConsumerThreads) -> None:
    raised: list[float] = []
    began: dict[str, float] = {}

    def handler(job: Any) -> str:
        began.setdefault(job.payload["n"] if job.attempts > 1 or job.payload["n"] != "x"
                         else "x-first", time.monotonic())
        if job.payload["n"] == "x" and job.attempts == 1:
            raised.append(time.monotonic())
            echomq.add(conn, queue, {"n": "later"})  # added while the queue waits
            raise echomq.RateLimited(400)
        return "ok"

    (x,) = echomq.add_many(conn, queue, [{"n": "x"}], max_attempts=1)
    consumers.start(handler, concurrency=1, prefetch=0)
    wait_until(lambda: echomq.counts(conn, queue).completed == 2)
    job = echomq.get_job(conn, queue, x)
    assert job is not None and job.state == "completed"  # one try only, and not dead
    assert job.attempts == 2 and job.last_error is None
    # nothing of the queue started before the wait was over (host clock, one process)
    assert began["x"] - raised[0] >= 0.38 and began["later"] - raised[0] >= 0.38


def test_a_grouped_rate_limited_holds_back_its_group_only(
        conn: Connection, queue: str, consumers: ConsumerThreads) -> None:
    began: dict[str, float] = {}
    raised: list[float] = []

    def handler(job: Any) -> None:
        name = job.payload["n"]
        if name == "a1" and job.attempts == 1:
            raised.append(time.monotonic())
            echomq.add(conn, queue, {"n": "a2"}, group="a")
            echomq.add(conn, queue, {"n": "b1"}, group="b")
            raise echomq.RateLimited(500)
        began.setdefault(name, time.monotonic())

    echomq.add(conn, queue, {"n": "a1"}, group="a", max_attempts=1)
    consumers.start(handler, concurrency=2)
    wait_until(lambda: echomq.counts(conn, queue).completed == 3)
    assert began["b1"] - raised[0] < 0.3  # another group flows on
    assert began["a1"] - raised[0] >= 0.48 and began["a2"] - raised[0] >= 0.48


def test_a_limited_claim_loop_sleeps_until_the_window_opens_and_stop_wakes_it(
        conn: Connection, queue: str, consumers: ConsumerThreads) -> None:
    echomq.set_rate_limit(conn, queue, 2, 60_000)
    echomq.add_many(conn, queue, [{"n": i} for i in range(5)])
    claims: list[str] = []
    spy = conn.with_executor(conn.executor_name)  # its own executor, whose claims we count
    run = spy.executor.run

    def counting(name: str, *rest: Any) -> Any:
        if name == "claim":
            claims.append(name)
        return run(name, *rest)

    spy.executor.run = counting  # type: ignore[method-assign]
    threads = ConsumerThreads(spy, queue, **QUICK)  # polls every 20 ms when idle
    consumer = threads.start(lambda job: None)
    try:
        wait_until(lambda: echomq.counts(conn, queue).completed == 2)
        time.sleep(0.5)
        assert len(claims) <= 4, claims  # no poll: it sleeps on the 60 s window
        assert echomq.counts(conn, queue).pending == 3
        stopping = time.monotonic()
        consumer.stop()
        threads.running[0][1].join(5)
        assert time.monotonic() - stopping < 3
    finally:
        threads.stop_all()
    # clearing the limit wakes sleeping Consumers at once
    consumer = consumers.start(lambda job: None)
    time.sleep(0.1)
    assert echomq.clear_rate_limit(conn, queue) is True
    wait_until(lambda: echomq.counts(conn, queue).completed == 5, timeout=5)
    assert echomq.rate_limits(conn, queue) == []


@pytest.mark.parametrize(("args", "message"), [
    ((0, 1000), "max_jobs must be an int from 1 to 100000, got 0"),
    ((-5, 1000), "max_jobs"),
    ((100_001, 1000), "max_jobs"),
    ((True, 1000), "max_jobs"),
    ((10, 0), "per_ms must be an int of milliseconds from 1 to 86400000"),
    ((10, 86_400_001), "per_ms"),
    ((10, 1.5), "per_ms"),
])
def test_bad_limits_are_refused_before_the_wire(args: tuple[Any, Any], message: str) -> None:
    conn = echomq.connect("redis://127.0.0.1:1/0", check=False)
    with pytest.raises(echomq.InvalidArgument, match=message):
        echomq.set_rate_limit(conn, "q", *args)
    with pytest.raises(echomq.InvalidKey, match="group 'a:b' contains ':'"):
        echomq.set_rate_limit(conn, "q", 5, 1000, group="a:b")
    for delay in (-1, 86_400_001, True, 1.0):
        with pytest.raises(echomq.InvalidArgument, match="RateLimited"):
            echomq.RateLimited(delay)  # type: ignore[arg-type]


def test_the_scripts_refuse_what_the_gates_refuse(conn: Connection, queue: str) -> None:
    keys = conn.keys(queue)
    for max_jobs, per_ms in (("0", "10"), ("10", "86400001"), ("100001", "10"), ("x", "1")):
        with pytest.raises(echomq.InvalidArgument, match="EMQ.RATE"):
            conn.executor.run("rate_limit", [keys.rate], [keys.base, "", max_jobs, per_ms])
    assert echomq.rate_limits(conn, queue) == []


def test_emq_rate_limit_sets_lists_and_clears(conn: Connection, queue: str) -> None:
    def emq(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, ["--url", conn.url, "--executor",
                                           conn.executor_name, *args])
        return result.exit_code, result.output

    assert emq("rate-limit", "-q", queue, "--max", "10", "--per", "1s") == (
        0, "queue: 10 per 1s\n")
    code, out = emq("rate-limit", "-q", queue, "--max", "3", "--per", "500ms", "--group", "g")
    assert code == 0 and out == "queue: 10 per 1s\ngroup g: 3 per 500ms\n"
    assert emq("rate-limit", "-q", queue, "--json")[1].strip() == (
        '[{"group": null, "max_jobs": 10, "per_ms": 1000}, '
        '{"group": "g", "max_jobs": 3, "per_ms": 500}]')
    assert emq("rate-limit", "-q", queue, "--clear", "--group", "g") == (
        0, f"cleared the rate limit of group 'g' of {queue}\n")
    assert emq("rate-limit", "-q", queue, "--clear")[0] == 0
    assert emq("rate-limit", "-q", queue) == (0, f"{queue} has no rate limits\n")
    for bad, says in ((["--max", "0", "--per", "1s"], "max_jobs must be an int from 1"),
                      (["--max", "5", "--per", "2d"], "per_ms must be an int"),
                      (["--max", "5", "--per", "10"], "is not a duration"),
                      (["--max", "5"], "give both --max and --per"),
                      (["--clear", "--max", "5", "--per", "1s"], "--clear removes the limit"),
                      (["--max", "5", "--per", "1s", "--group", "a b"], "contains ' '")):
        code, out = emq("rate-limit", "-q", queue, *bad)
        assert code != 0 and says in out, (bad, out)
    assert echomq.rate_limits(conn, queue) == []


def test_no_limit_leaves_no_rate_keys_and_the_claim_reply_as_it_was(
        conn: Connection, queue: str) -> None:
    echomq.set_rate_limit(conn, queue, 5, 1000)
    echomq.clear_rate_limit(conn, queue)
    echomq.add_many(conn, queue, [{"n": i} for i in range(3)])
    keys = conn.keys(queue)
    flat = conn.executor.run("claim", [keys.pending, keys.scheduled, keys.active],
                             [keys.base, 1000, 10])
    assert len(flat) == 1 + 4 * 3
    assert conn.redis.exists(keys.rate, keys.rate_log, keys.rate_parked) == 0
