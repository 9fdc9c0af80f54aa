"""Issue 24: kill -9 of a worker with 200 async jobs in flight loses nothing and records
each job once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import echomq
from tests.support import ROOT
from tests.support.waits import wait_until


def async_worker(url: str, queue: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "EMQ_TEST_QUEUE": queue, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", url, "--log-level", "WARNING", "worker",
         "tests.support.async_tasks:app", "--concurrency", "200", "--lease", "1s",
         "--record"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def test_kill_9_with_200_async_jobs_in_flight_loses_nothing(server_url, names) -> None:
    queue = names("crawl")
    conn = echomq.connect(server_url)
    total = 600
    echomq.add_many(conn, queue, [{"args": [n], "kwargs": {}} for n in range(total)],
                    name="tests.crawl")
    victim = async_worker(server_url, queue)
    survivor = None
    try:
        wait_until(lambda: echomq.counts(conn, queue).active >= 150, timeout=30)
        os.kill(victim.pid, signal.SIGKILL)  # 200 coroutines mid-await
        victim.wait(10)
        survivor = async_worker(server_url, queue)
        wait_until(lambda: echomq.counts(conn, queue).completed == total, timeout=60)
    finally:
        for proc in (victim, survivor):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)
    counts = echomq.counts(conn, queue)
    assert (counts.pending, counts.active, counts.scheduled, counts.dead) == (0, 0, 0, 0)
    recorded = [f["job"] for _, f in conn.redis.xrange(conn.keys(queue).completions)]
    assert len(recorded) == total and len(set(recorded)) == total  # exactly once each
    conn.close()
