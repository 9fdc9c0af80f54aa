"""A number a user types is the ASCII digits it looks like (issue 20, item 17).

``str.isdigit``, ``int`` and the regex ``\\d`` all take other scripts' digits: ``٣٠`` is
30 to them, ``²`` passes ``isdigit`` and then fails ``int`` with a raw ValueError. A cron
field, a duration and an export bound are refused in one line instead.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import echomq
from echomq.archive import Floor
from tests.support import ROOT
from tests.support.servers import closed_url


def _emq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "echomq", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("cron", ["\u0663\u0660 2 * * *", "*/\u0665 * * * *"])
def test_a_cron_in_other_digits_is_refused(server_url: str, queue: str, cron: str) -> None:
    conn = echomq.connect(server_url)
    try:
        with pytest.raises(echomq.InvalidArgument, match="ASCII"):
            echomq.schedule(conn, queue, "nightly", cron, {"n": 1})
        assert echomq.schedules(conn, queue) == []
    finally:
        conn.close()


def test_a_duration_in_other_digits_is_refused() -> None:
    """``emq purge --older-than ٣٠s`` purged rows older than 30 s."""
    done = _emq("--url", closed_url(), "purge", "-q", "q", "--older-than", "\u0663\u0660s")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "is not a duration" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("since", ["\u00b2", "\u0663"])
def test_an_export_bound_in_other_digits_is_refused(tmp_path: Path, since: str) -> None:
    """``--since ²`` was a raw ValueError, ``--since ٣`` the time 3 ms."""
    floor = tmp_path / "floor"
    Floor(floor).close()
    done = _emq("archive", "export", "q", str(tmp_path / "out.jsonl"), "--format", "jsonl",
                "--since", since, "--floor", str(floor))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "is neither ms nor an ISO 8601 time" in done.stderr
    assert "Traceback" not in done.stderr
