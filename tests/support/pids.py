"""Processes as /proc shows them: a supervisor's worker children, alive or a zombie; and
a child's output awaited without leaving it behind."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def ended(proc: subprocess.Popen[Any], timeout: float) -> tuple[Any, Any]:
    """``proc``'s output once it ends (``communicate``); past ``timeout`` it is killed and
    reaped, its pipes closed, and ``TimeoutExpired`` raised. A hung child left running is
    finalised in some later test, whose pytest then fails it for the ResourceWarnings
    ("subprocess N is still running", "unclosed file"): a failure in the wrong place."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def children(pid: int) -> set[int]:
    """The live (not zombie) worker children of ``pid`` (not multiprocessing's resource
    tracker)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(p) for p in text.split() if alive(int(p)) and b"spawn_main" in cmdline(p)}


def cmdline(pid: int | str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
