"""The shared Valkey of a data folder: the *one* persistent server that
``echomq.connect()`` with no URL and every ``emq`` command without ``--url`` use.

The first user starts it detached (its own session; it outlives the starter), with AOF
(``appendfsync everysec``); the next ones find it through a state file in the folder,
guarded by an ``fcntl`` lock so that two starters make one server. It runs until
``emq server stop`` (:meth:`SharedValkey.stop`). Unlike the servers of
:mod:`echomq.servers.process`, it is owned by its folder, not by a process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from echomq.errors import ConnectionFailed
from echomq.servers.process import free_port, pid_alive
from echomq.servers.valkey import (
    LOG_FILE,
    START_TIMEOUT_S,
    data_folder,
    probe,
    server_argv,
    wait_answering,
)

LOCK_TIMEOUT_S = 60.0
STATE_FILE = "emq-server.json"
LOCK_FILE = "emq-server.lock"
_START_ATTEMPTS = 3


@dataclass(frozen=True)
class ServerInfo:
    """The shared server of a folder, as its state file records it."""

    pid: int
    host: str
    port: int
    run_id: str
    data_dir: str

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"


_detached: list[subprocess.Popen[bytes]] = []
"""Shared servers this process started: kept so that no ``Popen`` is collected (and
warns) while its server, by design, outlives it."""


class SharedValkey:
    """The one persistent Valkey of a data folder, shared by every process using it.

    Found through ``emq-server.json`` (pid, port, run id) in the folder; every look
    runs under an ``fcntl`` lock on ``emq-server.lock``, so concurrent starters
    make ONE server. A state file whose pid is gone, or whose port does not answer
    with the recorded run id (the pid reused by another program), is stale and
    replaced; nothing but the recorded server is ever signalled.
    """

    host = "127.0.0.1"

    def __init__(self, data_dir: str | os.PathLike[str] | None = None) -> None:
        self.data_dir = data_folder(data_dir)

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    def ensure(self) -> ServerInfo:
        """The running server of the folder, started (detached) if there is none."""
        with self._locked():
            return self._find() or self._start()

    def find(self) -> ServerInfo | None:
        """The running server of the folder, or None (a stale state file is removed)."""
        with self._locked():
            return self._find()

    def stop(self, timeout: float = 10.0) -> ServerInfo | None:
        """Stop the folder's server (SIGTERM: the AOF is flushed); None if none ran.

        A recorded server that is alive but does not answer is stopped too: it is
        still this folder's valkey-server, and a command could not use it anyway.
        """
        with self._locked():
            state = self._read_state()
            running = state is not None and (
                self._answers(state) or (pid_alive(state.pid) and self._is_ours(state.pid))
            )
            if state is not None and running:
                _terminate(state.pid, timeout)
            self.state_path.unlink(missing_ok=True)
            return state if running else None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            handle = open(self.data_dir / LOCK_FILE, "a")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ConnectionFailed(f"cannot use the data folder {self.data_dir}: {exc}") from exc
        with handle:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ConnectionFailed(
                            f"another process holds {self.data_dir / LOCK_FILE} "
                            f"for over {LOCK_TIMEOUT_S:.0f}s"
                        ) from None
                    time.sleep(0.02)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _read_state(self) -> ServerInfo | None:
        try:
            return ServerInfo(**json.loads(self.state_path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):
            return None  # a torn or foreign file: treated as stale

    def _find(self) -> ServerInfo | None:
        state = self._read_state()
        if state is None:
            self.state_path.unlink(missing_ok=True)
            return None
        if self._answers(state):
            return state
        if pid_alive(state.pid) and self._is_ours(state.pid):
            if self._answers(state, wait=START_TIMEOUT_S):  # e.g. still loading its AOF
                return state
            raise ConnectionFailed(
                f"the embedded server of {self.data_dir} (pid {state.pid}) does not answer "
                f"on port {state.port}; see {self.data_dir / LOG_FILE}"
            )
        self.state_path.unlink(missing_ok=True)
        return None

    def _answers(self, state: ServerInfo, wait: float = 0.0) -> bool:
        """True when ``state``'s port answers with its run id, pid and this folder."""
        client = probe(state.host, state.port)
        deadline = time.monotonic() + wait
        try:
            while True:
                try:
                    info = client.info("server")
                    return bool(info.get("run_id") == state.run_id
                                and int(info.get("process_id", -1)) == state.pid
                                and client.config_get("dir").get("dir") == str(self.data_dir))
                except (redis.BusyLoadingError, redis.ConnectionError, redis.TimeoutError):
                    if time.monotonic() > deadline:
                        return False
                except redis.RedisError:
                    return False
                time.sleep(0.05)
        finally:
            client.close()

    def _is_ours(self, pid: int) -> bool:
        """Whether ``pid`` is a valkey-server working in this folder (it chdirs there)."""
        try:
            return Path(os.readlink(f"/proc/{pid}/cwd")) == self.data_dir and (
                "valkey" in Path(f"/proc/{pid}/comm").read_text()
            )
        except OSError:
            return False

    def _start(self) -> ServerInfo:
        """Start a detached server; a few ports are tried, a free one can be taken."""
        failure: ConnectionFailed | None = None
        for _ in range(_START_ATTEMPTS):
            port = free_port(self.host)
            process = subprocess.Popen(
                server_argv(self.host, port, self.data_dir, "everysec"),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # detached: no terminal signal reaches it
            )
            try:
                wait_answering(process, self.host, port, self.data_dir / LOG_FILE)
            except ConnectionFailed as exc:
                failure = exc
                if process.poll() is None:
                    process.kill()
                process.wait()
                continue
            _detached.append(process)
            return self._record(process.pid, port)
        assert failure is not None
        raise failure

    def _record(self, pid: int, port: int) -> ServerInfo:
        client = probe(self.host, port)
        try:
            run_id = str(client.info("server")["run_id"])
        finally:
            client.close()
        state = ServerInfo(pid, self.host, port, run_id, str(self.data_dir))
        partial = self.state_path.with_suffix(".tmp")
        partial.write_text(json.dumps(asdict(state)))
        os.replace(partial, self.state_path)
        return state


def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM ``pid`` (the server flushes its AOF) and wait; SIGKILL past ``timeout``."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
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


