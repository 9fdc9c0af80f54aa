"""Which commands start the folder's shared server, and how ``emq server stop`` treats
the clients still using it (issue 20, item 4).

Every test runs ``emq`` without ``--url`` in a fresh data folder, through click's
CliRunner, and checks the folder afterwards: a command that only reads leaves no server
process and no state file behind.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from echomq.cli import main
from echomq.servers.shared import STATE_FILE, SharedValkey


def servers_for(data_dir: Path) -> list[int]:
    """Pids of every valkey-server working in ``data_dir`` (Valkey chdirs to its --dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (entry.name.isdigit() and "valkey" in (entry / "comm").read_text()
                    and Path(os.readlink(entry / "cwd")) == data_dir.resolve()):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder that does not exist yet; whatever server ends up in it is stopped."""
    folder = tmp_path / "data"
    yield folder
    SharedValkey(folder).stop()
    for pid in servers_for(folder):
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"a server for {folder} outlived the test (pid {pid})")


def emq(data_dir: Path, *args: str, input: str | None = None) -> Result:
    """``emq --data-dir DATA_DIR ARGS`` with no EMQ_URL, on no terminal."""
    return CliRunner().invoke(main, ["--data-dir", str(data_dir), "--log-level", "WARNING",
                                     *args], input=input,
                              env={"EMQ_URL": None, "EMQ_DATA_DIR": None})


READS = [
    ["status"],
    ["status", "--queue", "q"],
    ["show", "--queue", "q", "some-id"],
    ["dead", "--queue", "q"],
    ["jobs", "--queue", "q", "--state", "pending"],
    ["queues"],
    ["schedules", "--queue", "q"],
    ["retention", "--queue", "q"],
    ["wait", "--queue", "q", "some-id", "--timeout", "1"],
    ["events", "--queue", "q", "--timeout", "1"],
]


@pytest.mark.parametrize("argv", READS, ids=lambda argv: "-".join(argv[:2]))
def test_a_command_that_only_reads_starts_no_server(data_dir: Path, argv: list[str]) -> None:
    done = emq(data_dir, *argv)
    assert done.exit_code == 1, done.output
    assert f"no server is running for {data_dir} (`emq server start`)" in done.output
    assert "Traceback" not in done.output
    assert servers_for(data_dir) == []
    assert not data_dir.exists()  # nothing made: no folder, no state file


@pytest.mark.parametrize("argv", [["status"], ["audit", "q"], ["show", "q", "some-id"]],
                         ids=lambda argv: argv[0])
def test_an_archive_read_of_a_missing_floor_creates_nothing(data_dir: Path, tmp_path: Path,
                                                           argv: list[str]) -> None:
    floor = tmp_path / "floor"
    done = emq(data_dir, "archive", *argv, "--floor", str(floor))
    assert done.exit_code == 1, done.output
    assert f"no floor at {floor}" in done.output
    assert not floor.exists() and not data_dir.exists() and servers_for(data_dir) == []


def test_a_read_finds_a_running_server_and_a_write_still_starts_one(data_dir: Path) -> None:
    data_dir.mkdir()
    assert emq(data_dir, "status", "--queue", "q").exit_code == 1
    assert not (data_dir / STATE_FILE).exists() and servers_for(data_dir) == []
    added = emq(data_dir, "enqueue", "--queue", "q", "{}")
    assert added.exit_code == 0, added.output
    assert len(servers_for(data_dir)) == 1
    shown = emq(data_dir, "status", "--queue", "q")
    assert shown.exit_code == 0 and "pending: 1" in shown.output


def test_server_stop_refuses_without_a_terminal_while_clients_are_connected(
    data_dir: Path,
) -> None:
    info = SharedValkey(data_dir).ensure()
    client = redis.Redis.from_url(info.url)
    client.ping()  # one client connected, as a worker would be
    try:
        refused = emq(data_dir, "server", "stop")
        assert refused.exit_code == 2, refused.output
        assert "1 client(s) are connected" in refused.output
        assert "--yes" in refused.output
        assert servers_for(data_dir) == [info.pid]  # still running
        stopped = emq(data_dir, "server", "stop", "--yes")
        assert stopped.exit_code == 0, stopped.output
        assert "1 client(s) were connected" in stopped.output
        assert servers_for(data_dir) == []
    finally:
        client.close()


def test_server_stop_asks_on_a_terminal(data_dir: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    info = SharedValkey(data_dir).ensure()
    client = redis.Redis.from_url(info.url)
    client.ping()
    monkeypatch.setattr("echomq.cli.server._on_a_terminal", lambda: True)
    try:
        kept = emq(data_dir, "server", "stop", input="n\n")
        assert kept.exit_code == 1 and "stop it?" in kept.output
        assert servers_for(data_dir) == [info.pid]
        stopped = emq(data_dir, "server", "stop", input="y\n")
        assert stopped.exit_code == 0, stopped.output
        assert servers_for(data_dir) == []
    finally:
        client.close()


def test_an_idle_server_stops_without_a_question(data_dir: Path) -> None:
    SharedValkey(data_dir).ensure()
    stopped = emq(data_dir, "server", "stop", "--json")
    assert stopped.exit_code == 0, stopped.output
    assert '"clients": 0' in stopped.output and servers_for(data_dir) == []
