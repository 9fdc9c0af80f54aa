"""Declaring a stream is the substrate's business: a recording worker never loads the archive."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import echomq
import echomq.archive
from echomq.queue import declared

PACKAGE = Path(echomq.__file__).parent

RECORDING_WORKER = textwrap.dedent("""
    import sys, threading, time
    import echomq
    conn = echomq.connect(sys.argv[1], executor=sys.argv[2])
    consumer = echomq.Consumer(conn, sys.argv[3], lambda job: None, record=True, poll_ms=50)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    thread.start()
    deadline = time.monotonic() + 10
    while not conn.redis.hget("emq:{" + sys.argv[3] + "}:meta", "stream"):
        assert time.monotonic() < deadline, "the recording Consumer never declared"
        time.sleep(0.02)
    consumer.stop()
    thread.join(10)
    print(sorted(m for m in sys.modules if m.startswith("echomq.archive") or m == "boto3"))
""")


def test_a_recording_consumer_declares_without_loading_the_archive(
        conn: echomq.Connection, queue: str, server_url: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", RECORDING_WORKER, server_url, conn.executor_name, queue],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert out.strip() == "[]"
    assert declared.is_declared(conn, queue) and echomq.archive.is_declared(conn, queue)
    assert queue in declared.declared_queues(conn)


def worker_modules() -> list[Path]:
    """The worker's modules, wherever the worker wing lives (``jobs`` or ``worker``)."""
    return [p for wing in ("jobs", "worker") for p in sorted((PACKAGE / wing).glob("*.py"))]


def test_no_worker_module_imports_the_archive() -> None:
    found = []
    for path in worker_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if module.startswith("echomq.archive"):
                found.append(f"{path.name}: {module}")
            if isinstance(node, ast.Import):
                found += [f"{path.name}: {a.name}" for a in node.names
                          if a.name.startswith("echomq.archive")]
    assert worker_modules() and not found, found


def test_the_archive_declares_through_the_substrate() -> None:
    for name in ("declare", "undeclare", "is_declared", "declared_queues", "archive_of_record",
                 "record_address"):
        assert getattr(echomq.archive, name) is getattr(declared, name)
