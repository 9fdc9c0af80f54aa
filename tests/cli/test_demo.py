"""``emq demo`` runs end to end and leaves nothing running that it started."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


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
                         r"\{'kind': 'ok', 'n': 5\}\): completed, result \{\"ok\":5\}",
                         flat)
    assert replayed and replayed.group(2) != replayed.group(1), done.stdout
    found = re.search(r"valkey: redis://127\.0\.0\.1:(\d+)/0", done.stdout)
    assert found, done.stdout
    with socket.socket() as probe:  # the demo's server is gone with the demo
        assert probe.connect_ex(("127.0.0.1", int(found.group(1)))) != 0
    assert not (tmp_path / "demo" / "valkey" / "emq-server.json").exists()  # not a shared one
