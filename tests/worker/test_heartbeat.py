"""The worker heartbeat (issue 26, item 4): every live Consumer (an App worker's supervisor
and each child too) keeps a record on the server from its beat, listing what it holds;
a stop removes it, a kill -9 leaves it to turn gone, then to lapse."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

import echomq
from echomq.queue.connection import Connection
from echomq.queue.workers import held_states
from tests.support import ROOT
from tests.support.consumers import ConsumerThreads
from tests.support.waits import wait_until


def test_a_consumers_record_lists_what_it_holds_and_goes_at_its_stop(
        conn: Connection, queue: str) -> None:
    release = threading.Event()
    threads = ConsumerThreads(conn, queue, poll_ms=20, beat_ms=50, concurrency=3)
    consumer = threads.start(lambda job: release.wait(10))
    try:
        ids = [echomq.add(conn, queue, {"n": i}) for i in range(2)]
        found = wait_until(lambda: [w for w in echomq.workers(conn, queue)
                                    if w.held_count == 2])
        (info,) = found
        assert consumer.heartbeat is not None and info.id == consumer.heartbeat.id
        assert (info.kind, info.host, info.pid) == ("consumer", socket.gethostname(),
                                                   os.getpid())
        assert (info.queues, info.concurrency, info.beat_ms) == ((queue,), 3, 50)
        assert info.alive and info.version == echomq.__version__
        assert sorted(h.id for h in info.held) == sorted(ids)
        assert {h.queue for h in info.held} == {queue}
        assert all(s["held"] and s["state"] == "active"
                   for s in held_states(conn, info.held))
        assert info.started_at <= info.last_beat_at
        assert echomq.workers(conn, f"{queue}-other") == []
    finally:
        release.set()
        threads.stop_all()
    assert [w for w in echomq.workers(conn) if w.id == info.id] == []


def test_a_record_lists_the_first_held_jobs_and_counts_them_all(conn: Connection,
                                                                 queue: str) -> None:
    from echomq.worker.heartbeat import Heartbeat

    record = Heartbeat(conn, [f"{queue}-{n}" for n in range(120)], 2, beat_ms=60_000)
    record.beat([(queue, f"j-{n}", 1) for n in range(150)])
    (info,) = echomq.workers(conn, f"{queue}-7")
    assert (len(info.held), info.held_count, info.held[-1].id) == (100, 150, "j-99")
    assert (len(info.queues), info.queue_count) == (100, 120)
    record.leave()
    assert echomq.workers(conn, f"{queue}-7") == []


@pytest.mark.plain_only  # a process is killed here; the slot layout is the test above's
def test_a_killed_worker_turns_gone_with_what_it_held_then_lapses(
        server_url: str, queue: str) -> None:
    conn = echomq.connect(server_url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", server_url, "--log-level", "WARNING",
         "worker", "tests.support.workers:sleepy", "--queue", queue, "--lease", "200ms",
         "--auto-extend"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        job_id = echomq.add(conn, queue, {"n": 1})
        info = wait_until(lambda: [w for w in echomq.workers(conn, queue)
                                   if w.pid == proc.pid and w.held_count == 1], 20)[0]
        assert info.alive and info.beat_ms == 100
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        gone = wait_until(lambda: [w for w in echomq.workers(conn, queue)
                                   if w.id == info.id and not w.alive])[0]
        assert [h.id for h in gone.held] == [job_id]
        (state,) = held_states(conn, gone.held)
        assert state["state"] == "active" and state["held"]  # nobody recovered it yet
        # its lease lapses (no beat renews it): a reap takes the job back, and the
        # record says so while it still shows the worker gone
        wait_until(lambda: echomq.reap(conn, queue) or not held_states(conn, gone.held)[0][
            "held"])
        assert held_states(conn, gone.held)[0]["state"] == "pending"
        wait_until(lambda: not [w for w in echomq.workers(conn) if w.id == info.id],
                   timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.plain_only
def test_a_supervisor_and_its_children_each_keep_a_record(
        server_url: str, queue: str) -> None:
    from tests.app.test_processes import Supervised

    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "2", "--concurrency", "2",
                   "--lease", "1s")
    try:
        found = wait_until(lambda: (lambda ws: ws if len(ws) == 3 else None)(
            echomq.workers(conn, queue)), timeout=30, step=0.05)
        kinds = sorted(w.kind for w in found)
        assert kinds == ["child", "child", "supervisor"]
        parent = next(w for w in found if w.kind == "supervisor")
        assert parent.pid == s.proc.pid and parent.concurrency == 4
        assert all(w.parent_pid == parent.pid and w.concurrency == 2
                   for w in found if w.kind == "child")
        assert all("procs.pid" in w.tasks for w in found)
        assert s.stop() == 0
    finally:
        s.kill()
    assert echomq.workers(conn, queue) == []
