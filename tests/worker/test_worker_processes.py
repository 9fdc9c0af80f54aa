"""Real worker processes (``python -m echomq worker``): kill -9, SIGTERM, bad handler paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import echomq
from echomq.queue.keys import Keys
from tests.support import ROOT
from tests.support.pids import ended
from tests.support.waits import wait_until


def worker(
    url: str, queue: str, handler: str, *extra: str, capture: bool = False
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", url, "--log-level", "WARNING", "worker",
         handler, "--queue", queue, *extra],
        cwd=ROOT, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )


def test_kill_9_mid_handler_loses_nothing_and_settles_everything_once(server_url, queue):
    conn = echomq.connect(server_url)
    total = 600
    echomq.add_many(conn, queue, [{"n": i} for i in range(total)])
    opts = ("--concurrency", "4", "--lease", "700ms", "--record", "--recovery", "reap")
    procs = [worker(server_url, queue, "tests.support.workers:slow", *opts) for _ in range(3)]
    try:
        wait_until(lambda: echomq.counts(conn, queue).completed >= 100, timeout=30)
        victim = procs[0]
        assert echomq.counts(conn, queue).active > 0
        os.kill(victim.pid, signal.SIGKILL)  # mid-handler: it holds claimed jobs
        victim.wait(10)
        wait_until(lambda: echomq.counts(conn, queue).completed == total, timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(20)
    counts = echomq.counts(conn, queue)
    assert (counts.pending, counts.active, counts.scheduled, counts.dead) == (0, 0, 0, 0)
    recorded = [f["job"] for _, f in conn.redis.xrange(Keys(queue).completions)]
    assert len(recorded) == total and len(set(recorded)) == total  # exactly once each


def test_sigterm_hands_back_running_jobs_and_exits(server_url, queue):
    conn = echomq.connect(server_url)
    echomq.add_many(conn, queue, [{"n": i} for i in range(2)])
    proc = worker(server_url, queue, "tests.support.workers:sleepy", "--concurrency", "2",
                  "--lease", "60s", "--grace", "200ms")
    try:
        wait_until(lambda: echomq.counts(conn, queue).active == 2, timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    counts = echomq.counts(conn, queue)
    assert (counts.active, counts.pending) == (0, 2)


def test_a_handler_path_that_does_not_import_is_a_clear_error(server_url, queue):
    proc = worker(server_url, queue, "tests.no_such_module:handler", capture=True)
    out, _ = ended(proc, 30)
    assert proc.returncode == 2
    assert b"cannot import module 'tests.no_such_module'" in out


def test_a_second_signal_skips_the_grace_period(server_url, queue):
    conn = echomq.connect(server_url)
    echomq.add(conn, queue, {"n": 1})
    proc = worker(server_url, queue, "tests.support.workers:sleepy", "--grace", "60s")
    try:
        wait_until(lambda: echomq.counts(conn, queue).active == 1, timeout=30)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert proc.poll() is None  # the first signal waits for the running handler
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0  # the second does not wait out the 60 s grace
    finally:
        if proc.poll() is None:
            proc.kill()
    assert echomq.counts(conn, queue).pending == 1  # and the job is handed back


def test_workers_ride_out_a_server_restart(private_server, queue):
    conn = echomq.connect(private_server.url)
    total = 300
    echomq.add_many(conn, queue, [{"n": i} for i in range(total)])
    proc = worker(private_server.url, queue, "tests.support.workers:slow", "--concurrency", "4",
                  "--lease", "1s", "--record")
    try:
        wait_until(lambda: echomq.counts(conn, queue).completed >= 50, timeout=30)
        private_server.restart()  # AOF on: every acknowledged write survives
        wait_until(lambda: echomq.counts(conn, queue).completed == total, timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    recorded = [f["job"] for _, f in conn.redis.xrange(Keys(queue).completions)]
    assert len(recorded) == total and len(set(recorded)) == total
