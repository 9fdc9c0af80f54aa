"""The shared Valkey of a data folder: the *one* persistent server that
``echomq.connect()`` with no URL and every ``emq`` command without ``--url`` use.

The first user starts it detached (its own session; it outlives the starter), with AOF
(``appendfsync everysec``); the next ones find it through a state file in the folder,
guarded by an ``fcntl`` lock so that two starters make one server. It runs until
``emq server stop`` (:meth:`SharedValkey.stop`). Unlike the servers of
:mod:`echomq.servers.process`, it is owned by its folder, not by a process.

It is its owner's alone: it listens on a unix socket inside the folder (0700, files
0600, see :mod:`echomq.servers.private`) and asks for a password kept in the folder
(``emq-server.conf.json``, 0600), the same across restarts; TCP is off unless asked for,
and then on 127.0.0.1 with the password. Its address never moves: the socket path is
fixed, and a restart reuses the recorded TCP port, so every client reconnects by itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis

from echomq.errors import ConnectionFailed, InvalidArgument
from echomq.servers.private import (
    folder_server,
    open_private,
    private_folder,
    read_private,
    socket_path,
    tighten,
    write_private,
)
from echomq.servers.shared_launch import launch, socket_client, terminate
from echomq.servers.valkey import LOG_FILE, START_TIMEOUT_S, data_folder

LOCK_TIMEOUT_S = 60.0
STATE_FILE = "emq-server.json"
LOCK_FILE = "emq-server.lock"
CONF_FILE = "emq-server.conf.json"
"""What the folder's server keeps across restarts: its password and its TCP port, if any."""
SOCKET_FILE = "valkey.sock"


@dataclass(frozen=True)
class ServerInfo:
    """The shared server of a folder, as its state file records it (``port`` 0: no TCP).

    ``url`` carries the password (it is what ``connect()`` takes): print it only through
    ``echomq.queue.connection.redact_url``."""

    pid: int
    socket: str
    port: int
    run_id: str
    data_dir: str
    password: str = field(default="", repr=False)
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"unix://:{self.password}@{quote(self.socket)}?db=0"

    @property
    def tcp_url(self) -> str | None:
        """The TCP address, when the server was started with one (same password)."""
        return f"redis://:{self.password}@{self.host}:{self.port}/0" if self.port else None


class SharedValkey:
    """The one persistent Valkey of a data folder, shared by every process using it.

    Found through ``emq-server.json`` (pid, socket, port, run id) in the folder; every
    look runs under an ``fcntl`` lock on ``emq-server.lock``, so concurrent starters
    make ONE server. The state file is not trusted: the folder and it must be the current
    user's and writable by no one else; the server is reached at the folder's own socket
    path (never at an address the file names) and must answer with the recorded run id,
    pid and folder; a pid is signalled only once ``/proc`` says it is this user's
    valkey-server of this folder. A stale state file is replaced, nothing signalled.

    ``tcp=True`` (or a ``port``) also listens on 127.0.0.1 (``port`` None: the one
    recorded for the folder, else a free one), ``tcp=False`` turns it off, None keeps
    what the folder's server had.
    """

    host = "127.0.0.1"

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *,
                 tcp: bool | None = None, port: int | None = None) -> None:
        self.data_dir = data_folder(data_dir)
        if port is not None and (isinstance(port, bool) or not 0 < port < 65536):
            raise InvalidArgument(f"port must be in 1..65535, got {port!r}")
        if port is not None and tcp is False:
            raise InvalidArgument("a port needs TCP (--tcp, tcp=True), not --no-tcp")
        self.tcp = True if port is not None else tcp
        self.port = port

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    @property
    def socket_path(self) -> Path:
        """The folder's socket: a fixed path, whatever the state file says."""
        return socket_path(self.data_dir, SOCKET_FILE)

    def ensure(self) -> ServerInfo:
        """The running server of the folder, started (detached) if there is none."""
        with self._locked():
            found = self._find()
            if found is None:
                return self._start()
            self._check_tcp(found)
            return found

    def find(self) -> ServerInfo | None:
        """The running server of the folder, or None (a stale state file is removed)."""
        with self._locked():
            return self._find()

    def stop(self, timeout: float = 10.0) -> ServerInfo | None:
        """Stop the folder's server (SIGTERM: the AOF is flushed); None if none ran.

        Only a pid that ``/proc`` shows as this user's valkey-server working in this
        folder is signalled (one that does not answer too: a command could not use it
        anyway); a state file naming anything else is just removed.
        """
        with self._locked():
            state = self._read_state()
            running = state is not None and folder_server(state.pid, self.data_dir)
            if state is not None and running:
                terminate(state.pid, self.data_dir, timeout)
            self.state_path.unlink(missing_ok=True)
            return state if running else None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.socket_path  # noqa: B018 - a folder too deep for a socket fails before any file
        private_folder(self.data_dir)
        fd = open_private(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        with os.fdopen(fd, "r+b") as handle:
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

    def _conf(self) -> dict[str, Any]:
        """The folder's lasting settings (password, TCP port); {} when none or torn."""
        text = read_private(self.data_dir / CONF_FILE)
        try:
            found = json.loads(text) if text else {}
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    def _read_state(self) -> ServerInfo | None:
        """The recorded server; ``socket`` is "" for one an older EchoMQ started (TCP, no
        password), else the folder's own socket path, whatever the file says."""
        text = read_private(self.state_path)
        if text is None:
            return None
        try:
            raw = json.loads(text)
            pid, run_id, port = int(raw["pid"]), str(raw["run_id"]), int(raw.get("port", 0))
            legacy = "socket" not in raw
        except (ValueError, TypeError, KeyError, AttributeError):
            return None  # a torn or foreign file: treated as stale
        password = self._conf().get("password")
        return ServerInfo(pid, "" if legacy else str(self.socket_path), port, run_id,
                          str(self.data_dir), password if isinstance(password, str) else "")

    def _find(self) -> ServerInfo | None:
        state = self._read_state()
        if state is None:
            self.state_path.unlink(missing_ok=True)
            return None
        ours = folder_server(state.pid, self.data_dir)
        if not state.socket and ours:
            raise ConnectionFailed(
                f"the server of {self.data_dir} (pid {state.pid}) was started by an older "
                "EchoMQ (TCP, no password): stop it with `emq server stop`, then start again")
        if state.socket and self._answers(state):
            return state
        if state.socket and ours:
            if self._answers(state, wait=START_TIMEOUT_S):  # e.g. still loading its AOF
                return state
            raise ConnectionFailed(
                f"the embedded server of {self.data_dir} (pid {state.pid}) does not answer "
                f"on {self.socket_path}; see {self.data_dir / LOG_FILE}"
            )
        self.state_path.unlink(missing_ok=True)
        return None

    def _answers(self, state: ServerInfo, wait: float = 0.0) -> bool:
        """True when the folder's socket answers with ``state``'s run id, pid and folder."""
        client = socket_client(self.socket_path, state.password)
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

    def _check_tcp(self, found: ServerInfo) -> None:
        """A running server asked for another TCP setting: say how to get it."""
        if self.tcp is None:
            return
        if self.tcp is False and found.port:
            raise ConnectionFailed(
                f"the server of {self.data_dir} also listens on 127.0.0.1:{found.port}: "
                "`emq server stop`, then `emq server start --no-tcp`")
        if self.tcp and (not found.port or self.port not in (None, found.port)):
            where = f"on port {found.port}" if found.port else "without TCP"
            raise ConnectionFailed(
                f"the server of {self.data_dir} runs {where}: `emq server stop`, "
                "then `emq server start --tcp [--port N]`")

    def _settings(self) -> tuple[str, int | None]:
        """The password (the folder's, or a new one, saved before any server uses it)
        and the TCP port to start on: None for none, 0 for a free one."""
        conf = self._conf()
        password = conf.get("password")
        recorded = conf.get("port")
        recorded = recorded if isinstance(recorded, int) and 0 < recorded < 65536 else None
        if not isinstance(password, str) or len(password) < 16:
            password = secrets.token_urlsafe(32)
            write_private(self.data_dir / CONF_FILE,
                          json.dumps({"password": password, "port": recorded}))
        if self.tcp is False:
            return password, None
        if self.port is not None:
            return password, self.port
        if self.tcp:
            return password, recorded or 0
        return password, recorded

    def _start(self) -> ServerInfo:
        """Start the folder's server detached (``shared_launch.launch``) and record it."""
        password, wanted = self._settings()
        tighten(self.data_dir)
        pid, port = launch(self.data_dir, self.socket_path, password, wanted, host=self.host)
        write_private(self.data_dir / CONF_FILE,
                      json.dumps({"password": password, "port": port or None}))
        return self._record(pid, port, password)

    def _record(self, pid: int, port: int, password: str) -> ServerInfo:
        client = socket_client(self.socket_path, password)
        try:
            run_id = str(client.info("server")["run_id"])
        finally:
            client.close()
        state = ServerInfo(pid, str(self.socket_path), port, run_id, str(self.data_dir),
                           password)
        write_private(self.state_path, json.dumps({
            "pid": pid, "socket": state.socket, "port": port, "run_id": run_id,
            "data_dir": state.data_dir}))
        return state

