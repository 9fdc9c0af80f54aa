"""``emq metrics``: a standalone scrape target over HTTP, and a worker killed with -9
seen by it (its lease past due, then recovered by the sweep)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import echomq
from echomq.archive import Driver, declare
from echomq.cli import main
from echomq.queue.connection import Connection
from tests.prometheus.scrape import Samples, parse, value
from tests.support import ROOT
from tests.support.waits import wait_lapsed, wait_until


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "echomq", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture
def exporter(server_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``emq metrics`` on a free port with a floor: (its /metrics URL, the floor path)."""
    floor = tmp_path / "floor"
    conn = echomq.connect(server_url)
    Driver(conn, floor).close()  # an empty floor to point at
    conn.close()
    proc = start("--url", server_url, "metrics", "--port", "0", "--floor", str(floor),
                 "--json")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "emq metrics exited before it served"
        yield json.loads(line)["url"], floor
    finally:
        stop(proc)


def get(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain; version=")
        return parse(reply.read())


def test_emq_metrics_serves_every_queue_over_http(
    exporter: tuple[str, Path], rconn: Connection, queue: str
) -> None:
    url, floor = exporter
    declare(rconn, queue)
    echomq.add_many(rconn, queue, [{"n": 1}, {"n": 2}])
    s = get(url)
    assert value(s, "echomq_jobs", queue=queue, state="pending") == 2
    assert value(s, "echomq_archive_lag_entries", queue=queue) == 0
    for held in echomq.claim(rconn, queue, count=2):
        echomq.complete(rconn, queue, held.id, held.token, "ok")
    s = get(url)
    assert value(s, "echomq_jobs_finished_total", queue=queue, outcome="completed") == 2
    assert value(s, "echomq_archive_lag_entries", queue=queue) == 2
    driver = Driver(rconn, floor, claim_custody=True)
    try:
        driver.fold(queue)
    finally:
        driver.close()
    s = get(url)  # the exporter reads the floor the driver just wrote
    assert value(s, "echomq_archive_lag_entries", queue=queue) == 0
    assert (value(s, "echomq_archive_last_fold_duration_seconds", queue=queue) or 0) > 0
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url.removesuffix("metrics") + "other", timeout=10)
    assert refused.value.code == 404
    refused.value.close()


def test_a_worker_killed_mid_handler_is_past_due_then_recovered(
    server_url: str, conn: Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    worker = start("--url", server_url, "--log-level", "WARNING", "worker",
                   "tests.support.workers:sleepy", "--queue", queue, "--lease", "500ms")
    try:
        wait_until(lambda: echomq.counts(conn, queue).active == 1, timeout=30)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
    finally:
        stop(worker)
    wait_lapsed(conn.redis, queue, job_id)
    out = CliRunner().invoke(main, ["--url", server_url, "metrics", "--once"])
    assert out.exit_code == 0, out.output
    s = parse(out.output)
    assert value(s, "echomq_active_leases_past_due", queue=queue) == 1
    assert value(s, "echomq_stalls_total", queue=queue, result="recovered") == 0
    assert echomq.stalled_check(conn, queue, max_stalled=2).recovered == [job_id]
    s = parse(CliRunner().invoke(main, ["--url", server_url, "metrics", "--once"]).output)
    assert value(s, "echomq_active_leases_past_due", queue=queue) == 0
    assert value(s, "echomq_stalls_total", queue=queue, result="recovered") == 1
    assert value(s, "echomq_jobs", queue=queue, state="pending") == 1


def test_emq_metrics_refuses_a_folder_without_a_floor(server_url: str, tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["--url", server_url, "metrics", "--once", "--floor",
                                    str(tmp_path / "nothing")])
    assert out.exit_code != 0
    assert "no floor at" in out.output
    assert not (tmp_path / "nothing").exists()  # refused, not created


def test_emq_metrics_refuses_a_port_that_is_taken(server_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = CliRunner().invoke(main, ["--url", server_url, "metrics", "--port", str(port)])
    assert out.exit_code != 0
    assert f"cannot listen on 127.0.0.1:{port}" in out.output
