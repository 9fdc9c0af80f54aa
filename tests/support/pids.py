"""Processes as /proc shows them: a supervisor's worker children, alive or a zombie."""

from __future__ import annotations

from pathlib import Path


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
