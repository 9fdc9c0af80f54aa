"""Starting and ending the process of a folder's shared Valkey: it runs detached (its own
session, it outlives the starter), with its configuration on stdin so the password never
reaches argv, and is signalled at the end only while ``/proc`` still shows it as the
folder's server. :class:`echomq.servers.shared.SharedValkey` decides when; this module
does it."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq.errors import ConnectionFailed
from echomq.servers.private import signal_folder_server
from echomq.servers.process import free_port, pid_alive, wait_ready
from echomq.servers.valkey import LOG_FILE, START_TIMEOUT_S, quoted, valkey_binary

START_ATTEMPTS = 3
"""Free TCP ports tried when a picked one was taken before the server bound it."""

_detached: list[subprocess.Popen[bytes]] = []
"""Shared servers this process started: kept so that no ``Popen`` is collected (and
warns) while its server, by design, outlives it."""


def launch(data_dir: Path, socket: Path, password: str, wanted: int | None, *,
           host: str) -> tuple[int, int]:
    """Start a detached server (umask 077, its config on stdin: the password never
    reaches argv) and return its pid and TCP port (0: none); ``wanted`` 0 picks a free
    port, and a picked TCP port may be taken, so a few are tried."""
    failure: ConnectionFailed | None = None
    for _ in range(START_ATTEMPTS if wanted == 0 else 1):
        port = free_port(host) if wanted == 0 else (wanted or 0)
        process = subprocess.Popen(
            [valkey_binary(), "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=data_dir,
            umask=0o077,  # AOF folder and files, log: the owner's only
            start_new_session=True,  # detached: no terminal signal reaches it
        )
        assert process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            process.stdin.write(server_config(data_dir, socket, host, port, password).encode())
        process.stdin.close()
        try:
            wait_ready(process, _answers_as(process, socket, password),
                       name="valkey-server", where=str(socket),
                       log=data_dir / LOG_FILE, timeout_s=START_TIMEOUT_S,
                       poll_s=0.02, error=ConnectionFailed)
        except ConnectionFailed as exc:
            if process.poll() is None:
                process.kill()
            process.wait()
            failure = exc if not port else ConnectionFailed(
                f"{exc} (is 127.0.0.1:{port} taken? `emq server start --tcp --port N` "
                "picks another, --no-tcp turns TCP off)")
            continue
        _detached.append(process)
        return process.pid, port
    assert failure is not None
    raise failure


def server_config(data_dir: Path, socket: Path, host: str, port: int, password: str) -> str:
    """The server's configuration, one directive a line (values quoted)."""
    settings = {
        "port": str(port), "bind": host, "protected-mode": "yes",
        "unixsocket": str(socket), "unixsocketperm": "600",
        "requirepass": password, "dir": str(data_dir), "daemonize": "no",
        "logfile": str(data_dir / LOG_FILE), "save": "",
        "appendonly": "yes", "appendfsync": "everysec",
    }
    return "".join(f"{key} {quoted(value)}\n" for key, value in settings.items())


def socket_client(path: Path, password: str) -> redis.Redis:
    """A client for one look at the folder's socket: short timeouts, no retries."""
    return redis.Redis(unix_socket_path=str(path), password=password or None,
                       socket_connect_timeout=1, socket_timeout=2,
                       retry=Retry(NoBackoff(), 0), decode_responses=True)


def _answers_as(process: subprocess.Popen[bytes], path: Path, password: str
                ) -> Callable[[], bool]:
    """Readiness: the socket answers, authenticated (so its data is loaded), as
    ``process``."""

    def ready() -> bool:
        client = socket_client(path, password)
        try:
            client.ping()
            return int(client.info("server")["process_id"]) == process.pid
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            return False
        finally:
            client.close()

    return ready


def terminate(pid: int, folder: Path, timeout: float) -> None:
    """SIGTERM the folder's server (it flushes its AOF) and wait; SIGKILL past
    ``timeout``. Each signal goes only to a pid still checked as the folder's server."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if not signal_folder_server(pid, folder, signum):
            _reap(pid)
            return
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        _reap(pid)
        if not pid_alive(pid):
            return
    raise ConnectionFailed(f"the embedded server (pid {pid}) did not exit")


def _reap(pid: int) -> None:
    """Collect ``pid`` if this process started it, so that it leaves no zombie."""
    for process in list(_detached):
        if process.pid == pid and process.poll() is not None:
            _detached.remove(process)
