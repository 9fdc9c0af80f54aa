"""A restart of a folder's shared server does not move it (issue 20, item 3): the socket
path and the password stay, so a running Consumer, a BatchScheduler and a dashboard,
never restarted, carry on by themselves once it is back, and nothing is lost."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import echomq
from echomq.scheduling.scheduler import BatchScheduler
from echomq.servers.process import free_port
from echomq.servers.shared import SharedValkey
from echomq.web.app import create_app
from echomq.worker.consumer import Consumer
from echomq.worker.context import JobContext
from tests.servers.test_embedded_server import emq_env
from tests.support import ROOT
from tests.support.waits import wait_until


def test_a_consumer_and_a_scheduler_ride_a_restart_of_the_folders_server(
    tmp_path: Path, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    folder = tmp_path / "data"
    shared = SharedValkey(folder)
    worker_conn = echomq.connect(data_dir=folder)
    batch_conn = echomq.connect(data_dir=folder)
    web_conn = echomq.connect(data_dir=folder)
    dashboard = TestClient(create_app(web_conn))
    handled: list[str] = []
    lock = threading.Lock()

    started = threading.Event()

    def handler(job: JobContext) -> object:
        if job.payload == {"waits": "for a cancel"}:
            started.set()
            for _ in range(3000):  # up to 30 s, checking its cancel token
                if (found := echomq.cancel.check(job.cancel_token)) is not None:
                    return echomq.CancelVerdict(found.reason)
                time.sleep(0.01)
            return "not cancelled"
        with lock:
            handled.append(job.id)
        return "ok"

    consumer = Consumer(worker_conn, queue, handler, concurrency=2, poll_ms=100, cancel=True)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    thread.start()
    swept = f"{queue}-swept"
    try:
        with BatchScheduler(batch_conn) as batch:
            batch.add_sweep(swept, interval_ms=100)
            producer = echomq.connect(data_dir=folder)
            before = echomq.add_many(producer, queue, [{"n": n} for n in range(5)])
            producer.close()
            wait_until(lambda: len(handled) == 5, timeout=30)
            assert dashboard.get(f"/queues/{queue}").status_code == 200
            first = shared.find()
            assert first is not None and shared.stop() == first
            wait_until(lambda: batch.passes > 0)
            passes = batch.passes
            second = shared.ensure()  # what `emq server start` does
            producer = echomq.connect(data_dir=folder)
            after = echomq.add_many(producer, queue, [{"n": n} for n in range(5, 10)])
            wait_until(lambda: len(handled) == 10, timeout=30)  # the same Consumer
            assert sorted(handled) == sorted(before + after)
            # handled is the handler's word; the settler reports back a moment later
            wait_until(lambda: echomq.counts(producer, queue).completed == 10, timeout=30)
            assert thread.is_alive() and second.pid != first.pid
            assert (second.url, second.socket) == (first.url, first.socket)  # never moved
            assert dashboard.get(f"/queues/{queue}").status_code == 200  # its pool too
            # its event subscription too: a cancel published after the restart is heard
            waiting = echomq.add(producer, queue, {"waits": "for a cancel"})
            assert started.wait(30)

            def cancelled() -> bool:
                job = echomq.get_job(producer, queue, waiting)
                if job is not None and job.state == "active":  # at most once: ask again
                    echomq.cancel.request(producer, queue, waiting, reason="after restart")
                    time.sleep(0.2)
                job = echomq.get_job(producer, queue, waiting)
                return job is not None and job.state == "completed"

            wait_until(cancelled, timeout=30)
            job = echomq.get_job(producer, queue, waiting)
            assert job is not None and job.cancel_reason == "after restart"
            # the scheduler's sweeps reach the restarted server: a lapsed lease is found
            echomq.add(producer, swept, {"lapses": True})
            [held] = echomq.claim(producer, swept, lease_ms=100)
            wait_until(lambda: echomq.counts(producer, swept).dead == 1, timeout=30)
            assert batch.passes > passes
            producer.close()
    finally:
        consumer.stop()
        thread.join(20)
        worker_conn.close()
        batch_conn.close()
        web_conn.close()
        shared.stop()
    assert not thread.is_alive() and held.id
    assert second.password not in caplog.text  # logged as unix://:***@...


def test_a_tcp_port_asked_for_is_kept_across_restarts(tmp_path: Path, queue: str) -> None:
    """``--tcp`` is remembered by the folder: a restart (asked for or not) reuses the
    recorded port and the password, so a TCP client's URL still works."""
    folder = tmp_path / "data"
    first = SharedValkey(folder, tcp=True).ensure()
    assert first.tcp_url is not None
    tcp = echomq.connect(first.tcp_url)
    try:
        job_id = echomq.add(tcp, queue, {"via": "tcp"})
        SharedValkey(folder).stop()
        second = SharedValkey(folder).ensure()  # as connect() with no URL would
        assert second.pid != first.pid and second.tcp_url == first.tcp_url
        job = echomq.get_job(tcp, queue, job_id)  # the same client, reconnected
        assert job is not None and job.payload == {"via": "tcp"}
        SharedValkey(folder).stop()
        assert SharedValkey(folder, tcp=False).ensure().port == 0  # --no-tcp turns it off
    finally:
        tcp.close()
        SharedValkey(folder).stop()


def test_emq_events_and_emq_metrics_ride_a_restart_of_the_folders_server(
        tmp_path: Path, queue: str) -> None:
    """The shell's long-running readers, without --timeout: ``emq events`` hears the
    events published after the server came back, and ``emq metrics`` scrapes it."""
    folder = tmp_path / "data"
    shared = SharedValkey(folder)
    shared.ensure()
    port = free_port()
    base = [sys.executable, "-m", "echomq", "--data-dir", str(folder), "--log-level",
            "WARNING"]
    events = subprocess.Popen([*base, "events", "-q", queue, "--json"], cwd=ROOT,
                              env=emq_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    metrics = subprocess.Popen([*base, "metrics", "--port", str(port)], cwd=ROOT, env=emq_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    heard: list[dict[str, object]] = []

    def listen() -> None:
        assert events.stdout is not None
        for line in events.stdout:
            heard.append(json.loads(line))

    reader = threading.Thread(target=listen, daemon=True)
    reader.start()
    try:
        wait_until(lambda: _scrape(port) is not None, timeout=30)
        producer = echomq.connect(data_dir=folder)
        try:
            first = _settle_one(producer, queue)
            wait_until(lambda: {"event": "completed", "job": first} in _jobs(heard), timeout=30)
        finally:
            producer.close()
        shared.stop()
        shared.ensure()  # what `emq server start` does: the same socket
        producer = echomq.connect(data_dir=folder)
        try:
            # at most once: an event published before the listener is back is gone, so
            # settle jobs until one is heard (each a new job, a new event)
            settled_after: list[str] = []

            def heard_after() -> bool:
                settled_after.append(_settle_one(producer, queue))
                time.sleep(0.2)
                return any(e in _jobs(heard) for e in
                           ({"event": "completed", "job": j} for j in settled_after))

            wait_until(heard_after, timeout=30)
            echomq.add(producer, queue, {"n": 2})
            pending = echomq.counts(producer, queue).pending

            def scraped_now() -> bool:
                text = _scrape(port) or ""
                return f'queue="{queue}",state="pending"}} {float(pending)}' in text

            wait_until(scraped_now, timeout=30)
        finally:
            producer.close()
        assert events.poll() is None and metrics.poll() is None  # both rode it
    finally:
        for process in (events, metrics):
            process.terminate()
            process.wait(20)
        reader.join(10)
        assert events.stdout is not None
        events.stdout.close()
        shared.stop()


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            return str(reply.read().decode())
    except OSError:
        return None


def _settle_one(conn: echomq.Connection, queue: str) -> str:
    """Add a job, claim and complete it: its id."""
    job_id = echomq.add(conn, queue, {"n": 1})
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    echomq.complete(conn, queue, held.id, held.token, "ok")
    return job_id


def _jobs(heard: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{"event": e.get("event"), "job": e.get("job")} for e in list(heard)]
