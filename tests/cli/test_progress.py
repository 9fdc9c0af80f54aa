"""Long work shows progress on a terminal and nothing elsewhere (issue 20, item 21):
drain, obliterate, a fold of a backlog, export and query draw the bar restore and verify
draw, on stderr when it is a terminal; a pipe or ``--json`` sees no bar.

Each command runs as a user runs it: ``python -m echomq`` in a subprocess whose stderr is a
real pseudo-terminal (or a pipe), against the suite's Valkey.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import echomq
from tests.support import ROOT
from tests.support.recorder import Recorder

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BACKLOG = 2500
"""Enough for several server calls (1,000 jobs or keys each) and several slices."""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMQ_", "AWS_"))}
    return {**env, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "120"}


def run(argv: list[str], terminal: bool) -> tuple[int, str, str]:
    """``emq ARGV``: its exit status, stdout, and what its stderr showed (on a
    pseudo-terminal of 120 columns when ``terminal``, else through a pipe)."""
    cmd = [sys.executable, "-m", "echomq", "--log-level", "WARNING", *argv]
    if not terminal:
        done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120)
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    shown: list[bytes] = []

    def read_terminal() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                return
            if not data:
                return
            shown.append(data)

    reader = threading.Thread(target=read_terminal)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        reader.join(10)
        os.close(master)
    return proc.returncode, out, ANSI.sub("", b"".join(shown).decode(errors="replace"))


Setup = Callable[[echomq.Connection, str, Path], list[str]]


def drain(conn: echomq.Connection, queue: str, tmp: Path) -> list[str]:
    echomq.add_many(conn, queue, [{"n": i} for i in range(BACKLOG)])
    return ["drain", "--queue", queue, "--yes"]


def obliterate(conn: echomq.Connection, queue: str, tmp: Path) -> list[str]:
    echomq.add_many(conn, queue, [{"n": i} for i in range(BACKLOG)])
    return ["obliterate", "--queue", queue, "--yes"]


def backlog(conn: echomq.Connection, queue: str) -> None:
    """A declared queue whose stream holds BACKLOG outcomes not folded yet."""
    echomq.archive.declare(conn, queue)
    Recorder(conn, queue).add(BACKLOG)


def fold(conn: echomq.Connection, queue: str, tmp: Path) -> list[str]:
    backlog(conn, queue)
    return ["archive", "fold", queue, "--floor", str(tmp / "floor"), "--slice-count", "500"]


def folded(conn: echomq.Connection, queue: str, tmp: Path) -> Path:
    backlog(conn, queue)
    floor = tmp / "floor"
    with echomq.archive.Driver(conn, floor, slice_count=500) as driver:
        driver.fold(queue)
    return floor


def export(conn: echomq.Connection, queue: str, tmp: Path) -> list[str]:
    floor = folded(conn, queue, tmp)
    return ["archive", "export", queue, str(tmp / "out.jsonl"), "--format", "jsonl",
            "--floor", str(floor)]


def query(conn: echomq.Connection, queue: str, tmp: Path) -> list[str]:
    floor = folded(conn, queue, tmp)
    return ["archive", "query", "SELECT count(*) AS n FROM outcomes", "--floor", str(floor)]


COMMANDS: dict[str, tuple[Setup, Callable[[str], str]]] = {
    "drain": (drain, lambda queue: f"drain {queue}"),
    "obliterate": (obliterate, lambda queue: f"obliterate {queue}"),
    "fold": (fold, lambda queue: f"fold {queue}"),
    "export": (export, lambda queue: f"export {queue}"),
    "query": (query, lambda queue: "query"),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_long_work_shows_a_bar_on_a_terminal(name: str, rconn: echomq.Connection,
                                             server_url: str, queue: str,
                                             tmp_path: Path) -> None:
    setup, label = COMMANDS[name]
    argv = ["--url", server_url, *setup(rconn, queue, tmp_path)]
    status, out, shown = run(argv, terminal=True)
    assert status == 0, out + shown
    done = re.findall(rf"{re.escape(label(queue))} .*?(\d+)/(\d+)", shown)
    assert done, f"no progress bar on the terminal: {shown!r}"
    units, total = map(int, done[-1])
    assert units == total >= BACKLOG  # the finished bar: every job, key or entry
    assert label(queue) not in out  # stdout keeps the result alone


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_bar_through_a_pipe_nor_with_json(name: str, rconn: echomq.Connection,
                                             server_url: str, queue: str,
                                             tmp_path: Path) -> None:
    setup, label = COMMANDS[name]
    argv = ["--url", server_url, *setup(rconn, queue, tmp_path)]
    status, out, err = run(argv, terminal=False)
    assert status == 0, out + err
    assert label(queue) not in err and "━" not in err
    if name in ("drain", "obliterate", "fold"):  # again, now with --json on a terminal
        if name == "fold":
            backlog(rconn, queue)
        else:
            echomq.add_many(rconn, queue, [{"n": 1}])
        status, out, shown = run([*argv, "--json"], terminal=True)
        assert status == 0, out + shown
        assert label(queue) not in shown and "━" not in shown
        json.loads(out.splitlines()[0])
