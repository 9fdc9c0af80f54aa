"""The command line is one package whose commands load what they need and no more, and
whose commands that reach a bucket build the remote from the same options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import echomq
from tests.support import ROOT

HEAVY = ("boto3", "botocore", "rich", "lmdb", "starlette", "jinja2", "uvicorn")
REPORT = ("import atexit, sys; atexit.register(lambda: print('LOADED', "
          f"sorted(m for m in {HEAVY!r} if m in sys.modules)))")


def loaded_after(code: str) -> list[str]:
    """Which heavy modules a fresh interpreter holds after running ``code``."""
    done = subprocess.run([sys.executable, "-c", f"{REPORT}\n{code}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("LOADED")]
    assert line, done.stdout + done.stderr
    return list(eval(line[-1].removeprefix("LOADED ")))


@pytest.mark.parametrize("code", ["import echomq", "import echomq.cli"])
def test_importing_the_library_or_the_command_line_loads_no_archive(code: str) -> None:
    assert loaded_after(code) == []


def test_emq_worker_help_does_not_pay_for_the_archive() -> None:
    loaded = loaded_after("from echomq.cli import main\nmain(['worker', '--help'])")
    assert loaded == []


def test_emq_archive_loads_the_archive_only_when_named() -> None:
    loaded = loaded_after("from echomq.cli import main\nmain(['archive', '--help'])")
    assert "rich" in loaded


def emq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "echomq", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_the_scheduler_reads_every_s3_variable_the_archive_commands_read() -> None:
    """EMQ_S3_CHECKSUM reaches ``emq scheduler --fold`` as it reaches ``emq archive fold``:
    a value the remote cannot take is refused by both, before any server is reached."""
    env = {"EMQ_S3_CHECKSUM": "sometimes", "EMQ_S3_BUCKET": "b"}
    dead_url = "redis://127.0.0.1:1/0"
    for argv in (("scheduler", "--fold"), ("archive", "fold")):
        done = emq("--url", dead_url, *argv, env=env)
        assert done.returncode == 2, (argv, done.stdout + done.stderr)
        assert "--checksum" in done.stderr and "sometimes" in done.stderr, done.stderr


def test_archive_commands_use_the_root_url(server_url: str, queue: str) -> None:
    done = emq("--url", server_url, "--log-level", "WARNING", "archive", "declare", queue,
               env={"EMQ_URL": "", "EMQ_REDIS_URL": ""})
    assert done.returncode == 0, done.stdout + done.stderr
    conn = echomq.connect(server_url)
    try:
        assert echomq.archive.is_declared(conn, queue)
    finally:
        echomq.archive.undeclare(conn, queue)
        conn.close()


def test_python_m_echomq_archive_is_the_archive_command_group() -> None:
    done = subprocess.run([sys.executable, "-m", "echomq", "archive", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    for command in ("fold", "audit", "restore", "verify", "ack-gap"):
        assert command in done.stdout


@pytest.mark.parametrize("argv", [["echomq.servers.seaweed"], ["echomq", "server", "s3"]])
def test_the_seaweedfs_launcher_has_its_own_home_and_stops_with_sigterm(
        tmp_path: Path, argv: list[str]) -> None:
    import os
    import signal
    import socket

    from echomq.servers import free_port

    port = free_port()
    launcher = subprocess.Popen(
        [sys.executable, "-m", *argv, str(tmp_path / "weed")], cwd=ROOT,
        env={**os.environ, "EMQ_S3_PORT": str(port)}, stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout is not None
        first = launcher.stdout.readline()
        assert first.strip() == f"S3 endpoint: http://127.0.0.1:{port}", first
    finally:
        launcher.send_signal(signal.SIGTERM)
        launcher.communicate(timeout=60)
    with socket.socket() as probe:  # the server went with its launcher
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def _imports(path: Path) -> set[str]:
    """Every ``echomq...`` module ``path`` imports, at any depth of its code."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "echomq"}


ENTRY_POINTS = {"echomq/__main__.py"}


def test_the_library_never_imports_its_faces() -> None:
    """The command line and the demo depend on the library, never the reverse (entry
    points, which nothing imports, excepted)."""
    offenders = [
        str(path.relative_to(ROOT)) for path in (ROOT / "echomq").rglob("*.py")
        if not path.is_relative_to(ROOT / "echomq" / "cli")
        and str(path.relative_to(ROOT)) not in ENTRY_POINTS
        and any(name.startswith("echomq.cli") for name in _imports(path))
    ]
    assert offenders == []


def test_the_launchers_stand_on_errors_alone() -> None:
    """Every launcher (Valkey and S3 alike) imports nothing of the library but its errors:
    the S3 ones hand out a plain endpoint, not the archive's remote."""
    for path in sorted((ROOT / "echomq" / "servers").glob("*.py")):
        assert {m for m in _imports(path)
                if not m.startswith("echomq.servers")} <= {"echomq.errors"}, path.name


PRINTING_COMMANDS = [
    ["enqueue"], ["cancel"], ["sweep"], ["reap"], ["dead"], ["purge"], ["status"], ["queues"],
    ["pause"], ["resume"], ["drain"], ["obliterate"], ["retry"], ["remove"], ["promote"],
    ["jobs"], ["show"], ["schedule"], ["unschedule"], ["schedules"], ["wait"], ["events"],
    ["retention"], ["metrics"], ["server", "start"], ["server", "status"], ["server", "stop"],
    ["archive", "audit"], ["archive", "fold"], ["archive", "restore"], ["archive", "show"],
    ["archive", "status"], ["archive", "verify"], ["archive", "ack-gap"],
    ["workers"], ["pause-schedule"], ["resume-schedule"],
]
"""Every ``emq`` command that prints a result (the long-running ones log instead)."""


@pytest.mark.parametrize("command", PRINTING_COMMANDS, ids=" ".join)
def test_every_command_that_prints_takes_json(command: list[str]) -> None:
    from click.testing import CliRunner

    from echomq.cli import main

    shown = CliRunner().invoke(main, [*command, "--help"])
    assert shown.exit_code == 0, shown.output
    assert "--json" in shown.output


def test_enqueue_prints_json_and_refuses_a_bad_queue_name(server_url: str) -> None:
    from click.testing import CliRunner

    from echomq.cli import main

    runner = CliRunner()
    done = runner.invoke(main, ["--url", server_url, "enqueue", "-q", "json-ids", "--json",
                                '{"n": 1}', '{"n": 2}'])
    assert done.exit_code == 0, done.output
    assert len(json.loads(done.output)["ids"]) == 2
    bad = runner.invoke(main, ["--url", server_url, "enqueue", "-q", "no{brace}", "1"])
    assert bad.exit_code == 1 and "Error:" in bad.output and bad.exception is not None
    assert "Traceback" not in bad.output
