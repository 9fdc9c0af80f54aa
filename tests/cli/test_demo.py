"""``emq demo`` runs end to end and leaves nothing running that it started; it tells its
story without log lines and ends with what to try against what it left."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.support import ROOT
from tests.support.waits import wait_until

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR) ", re.M)


def test_the_demo_runs_end_to_end_and_stops_its_private_server(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "echomq", "demo", "--workdir", str(tmp_path / "demo")],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "restored floor holds 26 entries" in done.stdout
    assert "resumed: job" in done.stdout and "retried 1 time(s)" in done.stdout
    assert re.search(r"a producer waited for job \S+: completed, result \{\"ok\":24\}",
                     done.stdout), done.stdout
    # retention forgets only what the archive holds: nothing before the fold, all after
    # (25 rows: the poison job's two deaths are two entries of one row)
    assert "retention before any fold: forgot 0 rows, kept 25 for the archive" in done.stdout
    assert "retention after the fold: forgot 25 rows, kept 0" in done.stdout
    fired = re.search(r"cron fired (\d+) jobs, one per fire time \(UTC\):\n(.*)\n", done.stdout)
    assert fired and int(fired.group(1)) >= 3, done.stdout
    times = fired.group(2).split()
    assert len(set(times)) == len(times) == int(fired.group(1))  # two schedulers, none twice
    # it ends with the archive's powers: SQL over the restored history (21 completions of
    # 20 ok + the flaky job, the held and the waited ones: 23; one cancel; two deaths) and
    # the replay of a job Redis forgot, run again from its archived payload
    assert re.search(r"│ cancelled *│ 1 *│", done.stdout), done.stdout
    assert re.search(r"│ completed *│ 23 *│ 2 *│", done.stdout), done.stdout
    assert re.search(r"│ dead *│ 2 *│", done.stdout), done.stdout
    flat = " ".join(done.stdout.split())  # rich wraps long lines at the terminal's width
    replayed = re.search(r"job (\S+) in Redis: None \(forgotten by retention\) .*replayed \1 "
                         r"from the archive as job (\S+) \(replay_of=demo/\1, payload "
                         r"\{\"args\": \[\"ok\", 5\], \"kwargs\": \{\}\}\): completed, "
                         r"result \{\"ok\":5\}",
                         flat)
    assert replayed and replayed.group(2) != replayed.group(1), done.stdout
    found = re.search(r"valkey: redis://:\*\*\*@127\.0\.0\.1:(\d+)/0", done.stdout)
    assert found, done.stdout
    with socket.socket() as probe:  # the demo's server is gone with the demo
        assert probe.connect_ex(("127.0.0.1", int(found.group(1)))) != 0
    assert not (tmp_path / "demo" / "valkey" / "emq-server.json").exists()  # not a shared one
    _tells_its_story_without_log_lines(done, tmp_path / "demo")
    _ends_with_what_to_try_next(done.stdout, tmp_path)


def _tells_its_story_without_log_lines(done: subprocess.CompletedProcess[str], root: Path
                                       ) -> None:
    """Issue 20, item 22: the worker's INFO lines went to stderr, into the narration; they
    go to the demo's log file, which the narration names."""
    assert not LOG_LINE.search(done.stdout), done.stdout
    assert done.stderr == "", done.stderr
    log = (root / "demo.log").read_text()
    assert "INFO echomq.consumer: consumer on 'demo'" in log, log
    assert f"log: {root / 'demo.log'}" in done.stdout


def _ends_with_what_to_try_next(stdout: str, tmp_path: Path) -> None:
    """Each suggested command, run as printed (the paths are the demo's own), works."""
    tail = stdout.rpartition("try next:\n")[2]
    commands = [shlex.split(line) for line in tail.splitlines() if line.startswith("  emq ")]
    assert [c[:3] for c in commands] == [
        ["emq", "archive", "query"], ["emq", "archive", "audit"], ["emq", "archive", "show"],
        ["emq", "dashboard", "--floor"]], tail
    env = {**os.environ, "EMQ_DATA_DIR": str(tmp_path / "valkey")}
    expect = ["| completed | 23 |", "dead outcomes", "demo job "]
    for argv, says in zip(commands[:3], expect, strict=True):
        done = subprocess.run([sys.executable, "-m", "echomq", *argv[1:]], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, env=env)
        flat = " ".join(done.stdout.replace("│", "|").split())
        assert done.returncode == 0 and says in flat, (argv, done.stdout + done.stderr)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    board = subprocess.Popen([sys.executable, "-m", "echomq", *commands[3][1:], "--port",
                              str(port)], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        def archive_page() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/archive", timeout=5) as r:
                    return str(r.read().decode())
            except OSError:
                return ""
        wait_until(lambda: "demo" in archive_page(), timeout=60)
    finally:
        board.terminate()
        board.wait(20)
        stop_server(tmp_path, env)


def stop_server(cwd: Path, env: dict[str, str]) -> None:
    """``emq server stop`` of ``cwd``'s folder, without asking (``--yes`` where it asks)."""
    for extra in (["--yes"], []):
        done = subprocess.run([sys.executable, "-m", "echomq", "server", "stop", *extra],
                              cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != 2:  # 2: a usage error (no --yes): try without
            assert done.returncode == 0, done.stdout + done.stderr
            return
