"""The embedded default as a user types it: real ``emq`` commands without ``--url``.

One persistent server per data folder, started by the first command and found by
the next, stopped only by ``emq server stop``; never a second one, never an orphan.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import echomq
from echomq.servers.process import free_port, pid_alive
from echomq.servers.shared import STATE_FILE, SharedValkey
from tests.support import ROOT
from tests.support.waits import wait_until


def emq_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EMQ_URL", "EMQ_DATA_DIR")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def emq(data_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one real ``emq`` command against the folder's embedded server."""
    done = subprocess.run(
        [sys.executable, "-m", "echomq", "--data-dir", str(data_dir), "--log-level",
         "WARNING", *args],
        cwd=ROOT, env=emq_env(), capture_output=True, text=True, timeout=60,
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def emq_worker(data_dir: Path, queue: str, handler: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "echomq", "--data-dir", str(data_dir), "--log-level",
         "WARNING", "worker", handler, "--queue", queue, "--concurrency", "1"],
        cwd=ROOT, env=emq_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def servers_for(data_dir: Path) -> list[int]:
    """Pids of every live valkey-server working in ``data_dir`` (Valkey chdirs to --dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if ("valkey" in (entry / "comm").read_text()
                    and Path(os.readlink(entry / "cwd")) == data_dir.resolve()
                    and pid_alive(int(entry.name))):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def pending(data_dir: Path, queue: str) -> int:
    out = emq(data_dir, "status", "--queue", queue, "--json").stdout
    return int(json.loads(out)["pending"])


def server_json(data_dir: Path, command: str = "start") -> dict[str, object]:
    done = emq(data_dir, "server", command, "--json", check=False)
    return dict(json.loads(done.stdout))


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data folder whose server (if any) is stopped after the test, and checked gone."""
    folder = tmp_path / "data"
    yield folder
    SharedValkey(folder).stop()
    for pid in servers_for(folder):  # a server the state file lost track of: a defect
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"a server for {folder} outlived `emq server stop` (pid {pid})")


def test_enqueue_then_status_shows_the_job_pending(data_dir: Path, queue: str) -> None:
    job_id = emq(data_dir, "enqueue", "--queue", queue, '{"n": 1}').stdout.strip()
    assert job_id
    assert pending(data_dir, queue) == 1
    [pid] = servers_for(data_dir)  # both commands used one server, still running
    assert server_json(data_dir, "status")["pid"] == pid


def test_a_worker_in_another_process_completes_the_job(data_dir: Path, queue: str) -> None:
    job_id = emq(data_dir, "enqueue", "--queue", queue, '{"n": 7}').stdout.strip()
    worker = emq_worker(data_dir, queue, "tests.support.workers:slow")
    try:
        conn = echomq.connect(data_dir=data_dir)  # the library sees the same server
        try:
            wait_until(lambda: echomq.counts(conn, queue).completed == 1, timeout=30)
            job = echomq.get_job(conn, queue, job_id)
            assert job is not None and job.result == {"done": 7}
        finally:
            conn.close()
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    assert len(servers_for(data_dir)) == 1


def test_the_job_survives_server_stop_and_the_next_command(data_dir: Path, queue: str) -> None:
    emq(data_dir, "enqueue", "--queue", queue, '{"n": 1}', '{"n": 2}')
    [first] = servers_for(data_dir)
    assert "stopped" in emq(data_dir, "server", "stop").stdout
    assert servers_for(data_dir) == [] and not pid_alive(first)
    emq(data_dir, "enqueue", "--queue", queue, '{"n": 3}')  # a write restarts it
    assert pending(data_dir, queue) == 3  # from the AOF
    [second] = servers_for(data_dir)
    assert second != first


def test_two_concurrent_commands_start_one_server(data_dir: Path, queue: str) -> None:
    argv = [sys.executable, "-m", "echomq", "--data-dir", str(data_dir), "enqueue",
            "--queue", queue, "{}"]
    procs = [subprocess.Popen(argv, cwd=ROOT, env=emq_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for _ in range(4)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, outs
    assert len(servers_for(data_dir)) == 1
    assert pending(data_dir, queue) == 4


def test_server_stop_leaves_no_process_and_status_says_so(data_dir: Path) -> None:
    started = server_json(data_dir, "start")
    assert started["state"] == "running" and servers_for(data_dir) == [started["pid"]]
    assert server_json(data_dir, "start")["pid"] == started["pid"]  # found, not doubled
    emq(data_dir, "server", "stop")
    assert servers_for(data_dir) == []
    assert not pid_alive(int(str(started["pid"])))
    status = emq(data_dir, "server", "status", check=False)
    assert status.returncode == 3 and "stopped" in status.stdout
    assert "no server running" in emq(data_dir, "server", "stop").stdout
    assert not (data_dir / STATE_FILE).exists()


def test_a_server_killed_9_is_replaced_by_the_next_command(data_dir: Path, queue: str) -> None:
    first = int(str(server_json(data_dir, "start")["pid"]))
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not pid_alive(first))
    emq(data_dir, "enqueue", "--queue", queue, "{}")
    [second] = servers_for(data_dir)
    assert second != first and server_json(data_dir, "status")["pid"] == second


def test_a_state_file_naming_another_programs_pid_is_replaced(data_dir: Path) -> None:
    """The pid was reused by another program: it is left alone and a server starts."""
    other = subprocess.Popen(["sleep", "60"])
    try:
        data_dir.mkdir(parents=True)
        (data_dir / STATE_FILE).write_text(json.dumps({
            "pid": other.pid, "host": "127.0.0.1", "port": free_port(),
            "run_id": "0" * 40, "data_dir": str(data_dir)}))
        status = emq(data_dir, "server", "status", check=False)
        assert status.returncode == 3  # not taken for a running server
        started = server_json(data_dir, "start")
        assert started["pid"] != other.pid and servers_for(data_dir) == [started["pid"]]
        assert other.poll() is None  # never signalled
    finally:
        other.kill()
        other.wait()


def test_workers_killed_9_leave_exactly_one_server_reused_next(
    data_dir: Path, queue: str
) -> None:
    """Item 11: a SIGKILLed worker orphans nothing; the shared server stays the one."""
    server_json(data_dir, "start")
    [server] = servers_for(data_dir)
    conn = echomq.connect(data_dir=data_dir)
    try:
        for kills in range(1, 4):
            echomq.add(conn, queue, {"kill": kills})
            worker = emq_worker(data_dir, queue, "tests.support.workers:sleepy")
            wait_until(lambda n=kills: echomq.counts(conn, queue).active == n, timeout=30)
            worker.kill()
            worker.wait(10)
    finally:
        conn.close()
    assert servers_for(data_dir) == [server]
    status = json.loads(emq(data_dir, "status", "--queue", queue, "--json").stdout)
    assert status["active"] == 3  # the next command found the same server and its data
    assert server_json(data_dir, "status")["pid"] == server


def test_a_state_file_copied_from_another_folder_is_not_taken(
    data_dir: Path, tmp_path: Path
) -> None:
    """The recorded server answers, but works in another folder: this one gets its own."""
    other = SharedValkey(tmp_path / "other")
    try:
        theirs = other.ensure()
        data_dir.mkdir(parents=True)
        (data_dir / STATE_FILE).write_text((other.data_dir / STATE_FILE).read_text())
        ours = SharedValkey(data_dir).ensure()
        assert ours.pid != theirs.pid and ours.data_dir == str(data_dir.resolve())
        assert servers_for(data_dir) == [ours.pid]
        assert other.find() == theirs  # the other folder's server is left as it was
    finally:
        other.stop()


def test_a_data_dir_that_cannot_be_a_folder_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = emq(blocker / "data", "enqueue", "--queue", "q", "{}", check=False)
    assert done.returncode == 1
    assert "cannot use the data folder" in done.stderr and "Traceback" not in done.stderr


def test_archive_commands_use_the_folder_given_to_emq(data_dir: Path, queue: str) -> None:
    """``emq --data-dir D archive ...`` reaches D's server, like every other command."""
    emq(data_dir, "archive", "declare", queue)
    [pid] = servers_for(data_dir)
    assert server_json(data_dir, "status")["pid"] == pid
