"""``emq worker module:app`` runs an App's tasks over the queues of ``-q``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import echomq
from tests.support import ROOT
from tests.support.pids import ended
from tests.support.waits import wait_until


def test_emq_worker_runs_an_apps_tasks_over_two_queues(server_url, names) -> None:
    high, mail = names("high"), names("mail")
    conn = echomq.connect(server_url)
    sent = echomq.add(conn, mail, {"args": ["a@b"], "kwargs": {"subject": "hi"}},
                      name="tests.send")
    pinged = echomq.add(conn, high, {"args": [], "kwargs": {}}, name="tests.ping")
    env = {**os.environ, "EMQ_TEST_QUEUES": f"{high},{mail}", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", server_url, "--log-level", "INFO",
         "worker", "tests.support.tasks:app", "-q", f"{high},{mail}", "--concurrency", "2"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: echomq.get_job(conn, mail, sent).state == "completed"
                   and echomq.get_job(conn, high, pinged).state == "completed", timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = ended(proc, 30)
    assert proc.returncode == 0, out
    assert echomq.get_job(conn, mail, sent).result == "sent a@b hi"
    assert echomq.get_job(conn, high, pinged).result == "pong"
    assert f"queues {high}, {mail} (strict order)" in out
    assert "tasks: tests.ping, tests.send" in out
    assert f"tests.send {mail}/{sent} attempt 1 completed in " in out
    conn.close()


def test_emq_worker_with_a_function_still_needs_a_queue(server_url) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "echomq", "--url", server_url, "worker",
         "tests.support.workers:slow"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--queue/-q is required with a function" in proc.stderr
