"""A folder's shared server is its owner's alone (issue 20, items 1 and 2).

Another local user (``nobody``, run with ``setpriv``) can neither reach the server (the
socket is in a 0700 folder; a TCP port asked for wants the password) nor read its AOF,
its state or its password; a folder or state file someone else could have written is
refused; and ``emq server stop`` signals nothing but the folder's own valkey-server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socketserver
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

import echomq
from echomq.cli.demo import private_servers
from echomq.servers.private import private_folder
from echomq.servers.process import pid_alive
from echomq.servers.seaweed import DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY
from echomq.servers.shared import STATE_FILE, SharedValkey
from echomq.servers.valkey import EmbeddedValkey
from tests.servers.test_embedded_server import emq, servers_for
from tests.support.waits import wait_until

NOBODY = 65534

_PROBE = r"""
import json, socket, sys
def talk(family, where, commands):
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(5)
        sock.connect(where)
    except OSError as exc:
        return "unreachable: " + type(exc).__name__
    replies = []
    with sock:
        for words in commands:
            wire = "*%d\r\n" % len(words) + "".join(
                "$%d\r\n%s\r\n" % (len(w.encode()), w) for w in words)
            sock.sendall(wire.encode())
            replies.append(sock.recv(65536).decode(errors="replace"))
    return replies
def read(path):
    try:
        with open(path, "rb") as handle:
            return "read: " + handle.read().decode(errors="replace")
    except OSError as exc:
        return "refused: " + type(exc).__name__
folder, port = sys.argv[1], int(sys.argv[2])
commands = [["KEYS", "*"], ["CONFIG", "SET", "requirepass", "mine"]]
out = {"socket": talk(socket.AF_UNIX, folder + "/valkey.sock", commands),
       "tcp": talk(socket.AF_INET, ("127.0.0.1", port), commands) if port else None,
       "files": {name: read(folder + "/" + name) for name in sys.argv[3:]}}
print(json.dumps(out))
"""


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as uid/gid 65534 with no groups (root and setpriv needed)."""
    missing = ("root" if os.geteuid() != 0 else None) or (
        "setpriv" if shutil.which("setpriv") is None else None)
    if missing:
        message = f"this test runs a second user through setpriv: needs {missing}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
        capture_output=True, text=True, timeout=60, cwd="/")


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A 0755 folder in /tmp that ``nobody`` may walk through (pytest's own tmp is 0700,
    which alone would hide a careless data folder), for the data folder ``data``."""
    base = Path(tempfile.mkdtemp(prefix="emq-trust-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
        folder = base / "data"
        with contextlib.suppress(echomq.ConnectionFailed):
            SharedValkey(folder).stop()
        for pid in servers_for(folder):
            os.kill(pid, 9)
            pytest.fail(f"a server for {folder} outlived the test (pid {pid})")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _probe(folder: Path, port: int, *files: str) -> dict[str, object]:
    done = as_nobody(sys.executable, "-c", _PROBE, str(folder), str(port), *files)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def _aof_files(folder: Path) -> list[str]:
    return [f"appendonlydir/{p.name}" for p in sorted((folder / "appendonlydir").iterdir())]


def test_another_user_cannot_reach_the_server_nor_read_its_files(
    open_base: Path, queue: str
) -> None:
    """Item 1: was 127.0.0.1 without a password, folder 0755, AOF 0644: ``nobody`` read
    the port from the state file, listed the keys and could lock the owner out."""
    folder = open_base / "data"
    conn = echomq.connect(data_dir=folder)
    try:
        echomq.add(conn, queue, {"card": "4242-secret"})
    finally:
        conn.close()
    state = json.loads((folder / STATE_FILE).read_text())
    out = _probe(folder, int(state.get("port") or 0), STATE_FILE, "emq-server.conf.json",
                 "valkey.log", *_aof_files(folder))
    assert str(out["socket"]).startswith("unreachable")
    assert out["tcp"] is None  # no TCP unless asked for
    files = out["files"]
    assert isinstance(files, dict)
    assert all(str(v).startswith("refused") for v in files.values()), files
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in folder.rglob("*"):
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    conn = echomq.connect(data_dir=folder)  # the owner is not locked out
    try:
        assert echomq.counts(conn, queue).pending == 1
    finally:
        conn.close()


def test_a_tcp_port_asked_for_still_wants_the_password(open_base: Path) -> None:
    folder = open_base / "data"
    info = SharedValkey(folder, tcp=True).ensure()
    assert info.port and info.tcp_url is not None
    out = _probe(folder, info.port, "emq-server.conf.json")
    assert str(out["socket"]).startswith("unreachable")
    replies = out["tcp"]
    assert isinstance(replies, list) and all(r.startswith("-NOAUTH") for r in replies), replies
    files = out["files"]
    assert isinstance(files, dict) and str(files["emq-server.conf.json"]).startswith("refused")
    assert info.password not in json.dumps(emq(folder, "server", "status", "--json").stdout)
    assert info.password not in emq(folder, "server", "status").stdout
    assert "***" in emq(folder, "server", "status").stdout


def test_the_demos_servers_want_this_runs_secrets_and_its_folder_is_private(
        open_base: Path) -> None:
    """``emq demo`` ran Valkey on a loopback port with no password in a 0755 folder, and
    SeaweedFS with the dev server's well-known keys: ``nobody`` could read and rewrite its
    jobs and its bucket while it ran, and its floors after."""
    root = open_base / "demo"
    private_folder(root)
    with private_servers(root) as (valkey, s3):
        out = _probe(root / "valkey", valkey.port, "valkey/valkey-auth.conf")
        replies = out["tcp"]
        assert isinstance(replies, list) and all(r.startswith("-NOAUTH") for r in replies), \
            replies
        assert str(out["socket"]).startswith("unreachable")
        assert isinstance(out["files"], dict)
        assert str(out["files"]["valkey/valkey-auth.conf"]).startswith("refused")
        assert valkey.password and valkey.password.encode() not in Path(
            f"/proc/{valkey.pid}/cmdline").read_bytes()  # argv is anyone's to read
        stranger = boto3.client("s3", endpoint_url=s3.endpoint_url, region_name="us-east-1",
                                aws_access_key_id=DEFAULT_ACCESS_KEY,
                                aws_secret_access_key=DEFAULT_SECRET_KEY)
        with pytest.raises(ClientError):
            stranger.list_buckets()
        conn = echomq.connect(valkey.url)  # the owner's URL carries the password
        try:
            echomq.add(conn, "demo", {"n": 1})
            assert echomq.counts(conn, "demo").pending == 1
        finally:
            conn.close()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700


def test_a_world_writable_folder_with_a_planted_state_file_is_refused(
    open_base: Path, queue: str
) -> None:
    """Item 2: a 1777 folder (as /tmp) where ``nobody`` planted ``emq-server.json``."""
    folder = open_base / "data"
    folder.mkdir()
    folder.chmod(0o1777)
    plant = ("import json, sys; open(sys.argv[1], 'w').write(json.dumps({'pid': 1, "
             "'host': '127.0.0.1', 'port': 1, 'run_id': 'x', 'data_dir': sys.argv[2]}))")
    done = as_nobody(sys.executable, "-c", plant, str(folder / STATE_FILE), str(folder))
    assert done.returncode == 0, done.stderr
    refused = emq(folder, "server", "start", check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"refusing the data folder {folder}" in refused.stderr
    assert "writable by others" in refused.stderr
    with pytest.raises(echomq.ConnectionFailed, match="writable by others"):
        echomq.connect(data_dir=folder)
    assert servers_for(folder) == []


def test_a_folder_owned_by_another_user_is_refused(open_base: Path) -> None:
    folder = open_base / "data"
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)
    refused = emq(folder, "server", "start", check=False)
    assert refused.returncode == 1
    assert f"refusing the data folder {folder}: it is owned by uid {NOBODY}" in refused.stderr
    assert servers_for(folder) == []
    folder.rmdir()


@pytest.mark.parametrize("how", ["owned by nobody", "writable by others"])
def test_a_state_file_someone_else_could_write_is_refused(open_base: Path, how: str) -> None:
    folder = open_base / "data"
    SharedValkey(folder).ensure()
    SharedValkey(folder).stop()
    state = folder / STATE_FILE
    state.write_text(json.dumps({"pid": 1, "host": "127.0.0.1", "port": 1, "run_id": "x",
                                 "data_dir": str(folder)}))
    if how == "owned by nobody":
        os.chown(state, NOBODY, NOBODY)
    else:
        state.chmod(0o666)
    for command in ("start", "stop", "status"):
        refused = emq(folder, "server", command, check=False)
        assert refused.returncode == 1, (command, refused.stdout)
        assert f"refusing {state}" in refused.stderr and "Traceback" not in refused.stderr
    assert servers_for(folder) == []
    state.unlink()


class _Liar(socketserver.BaseRequestHandler):
    """A fake server (RESP3, as redis-py asks with HELLO 3) answering INFO and CONFIG GET
    dir with whatever pid and folder it was told to claim, +OK to anything else."""

    server: _LiarServer

    def handle(self) -> None:
        reader = self.request.makefile("rb")
        while True:
            line = reader.readline()
            if not line:
                return
            words = []
            for _ in range(int(line[1:])):
                reader.readline()
                words.append(reader.readline().strip().decode())
            verb = words[0].upper()
            if verb == "HELLO":
                self.request.sendall(b"%1\r\n$5\r\nproto\r\n:3\r\n")
            elif verb == "INFO":
                body = (f"run_id:{'f' * 40}\r\nprocess_id:{self.server.claimed_pid}\r\n"
                        ).encode()
                self.request.sendall(b"$%d\r\n%s\r\n" % (len(body), body))
            elif verb == "CONFIG":
                folder = self.server.claimed_dir.encode()
                self.request.sendall(b"%%1\r\n$3\r\ndir\r\n$%d\r\n%s\r\n" % (len(folder), folder))
            else:
                self.request.sendall(b"+OK\r\n")


class _LiarServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    claimed_pid = 0
    claimed_dir = ""


@pytest.mark.parametrize("owner", ["nobody", "the same user"])
def test_stop_never_signals_a_pid_that_is_not_the_folders_server(
    open_base: Path, owner: str
) -> None:
    """Item 2: a state file naming a ``sleep`` (and a fake server that vouches for it:
    the old check asked the address the file named) never gets it killed."""
    folder = open_base / "data"
    folder.mkdir(mode=0o700)
    argv = ["sleep", "60"]
    if owner == "nobody":
        as_nobody("true")  # fails or skips here when no second user can run
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    victim = subprocess.Popen(argv, cwd=folder)
    liar = _LiarServer(("127.0.0.1", 0), _Liar)
    liar.claimed_pid, liar.claimed_dir = victim.pid, str(folder)
    threading.Thread(target=liar.serve_forever, daemon=True).start()
    try:
        (folder / STATE_FILE).write_text(json.dumps({
            "pid": victim.pid, "host": "127.0.0.1", "port": liar.server_address[1],
            "run_id": "f" * 40,
            "data_dir": str(folder)}))
        (folder / STATE_FILE).chmod(0o600)
        done = emq(folder, "server", "stop", check=False)
        assert "no server running" in done.stdout, done.stdout + done.stderr
        assert victim.poll() is None and pid_alive(victim.pid)  # never signalled
        assert SharedValkey(folder).stop() is None and victim.poll() is None
    finally:
        liar.shutdown()
        liar.server_close()
        victim.kill()
        victim.wait()


def test_a_folder_too_deep_for_a_unix_socket_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / ("d" * 100)
    done = emq(folder, "server", "start", check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "too deep for its server's unix socket" in done.stderr
    assert "use a shorter --data-dir" in done.stderr
    assert not folder.exists()


def test_a_server_an_older_echomq_started_is_named_and_can_be_stopped(tmp_path: Path) -> None:
    """Upgrading: the folder's server from before (TCP, no password, a state file with no
    socket) is not used, nor doubled by a second server on its AOF; stop still stops it."""
    folder = tmp_path / "data"
    older = EmbeddedValkey(folder).start()  # a valkey-server working in the folder
    try:
        assert older.pid is not None
        (folder / STATE_FILE).write_text(json.dumps({
            "pid": older.pid, "host": "127.0.0.1", "port": older.port, "run_id": "0" * 40,
            "data_dir": str(folder)}))
        with pytest.raises(echomq.ConnectionFailed, match="started by an older EchoMQ"):
            echomq.connect(data_dir=folder)
        stopped = SharedValkey(folder).stop()
        assert stopped is not None and stopped.pid == older.pid
        wait_until(lambda: not older.running())
        conn = echomq.connect(data_dir=folder)  # now the folder's own, on its socket
        try:
            assert conn.url.startswith("unix://") and conn.redis.ping()
        finally:
            conn.close()
    finally:
        older.cleanup()
        SharedValkey(folder).stop()
