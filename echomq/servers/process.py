"""One lifecycle for every server process the project starts (Valkey, SeaweedFS, moto).

:class:`ServerProcess` spawns a child, waits until it is ready, and stops, kills,
restarts and cleans it up. The child never outlives its owner: it is stopped at exit,
and on Linux it gets SIGTERM when its owner dies, even by SIGKILL (``PR_SET_PDEATHSIG``,
armed from one long-lived spawner thread, see :func:`_spawner`).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Protocol, Self

from echomq.errors import ConnectionFailed, EchoMQError, LauncherError, PortTaken

_PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS says is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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
    """The one thread that starts owned servers.

    Linux sends the parent-death signal when the *thread* that forked the child
    ends; starting every owned server from this thread, which lives as long as
    the process, ties the server to the process and not to whichever thread (a
    test's helper thread, say) asked for it.
    """
    global _spawn_pool
    with _spawn_lock:
        if _spawn_pool is None:
            _spawn_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="emq-spawn")
        return _spawn_pool


def wait_ready(process: subprocess.Popen[bytes], ready: Callable[[], bool], *,
               name: str, where: str, log: Path | None, timeout_s: float, poll_s: float,
               error: type[EchoMQError], failure: str = "did not answer in time") -> None:
    """Call ``ready`` until it is True; ``error`` if ``process`` exits first or
    ``timeout_s`` passes (``ready`` may raise to give up early)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise error(f"{name} exited with {process.returncode} at start; see {log}")
        if ready():
            return
        if time.monotonic() > deadline:
            raise error(f"{name} at {where} {failure}; see {log}")
        time.sleep(poll_s)


PORT_PICKS = 3
"""How many sets of freshly picked ports a first start tries before it gives up."""


class ServerProcess:
    """A server child owned by this process: spawn, wait ready, stop, kill, restart,
    clean up. Subclasses say how to start (:meth:`start`) and where they listen."""

    name = "server"
    error: type[EchoMQError] = LauncherError
    start_timeout_s = 60.0
    poll_s = 0.1
    stop_timeout_s = 10.0

    def __init__(self, host: str = "127.0.0.1", owned_dir: Path | None = None) -> None:
        self.host = host
        self._owned_dir = owned_dir
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None
        self.exit_at_start: int | None = None
        """The exit status of a start that failed because the server exited by itself."""

    def where(self) -> str:
        """Where it listens, for messages."""
        return self.host

    def start(self) -> Self:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _spawn(self, argv: list[str], *, log: Path | None = None,
               env: dict[str, str] | None = None) -> None:
        """Start ``argv`` from the spawner thread, in its own session (a Ctrl-C in the
        terminal reaches us, not the server), dying with this process."""
        self._log = log
        out: IO[bytes] | int = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        try:
            self._process = _spawner().submit(
                subprocess.Popen, argv, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT if log else subprocess.DEVNULL, env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent_hook(),  # only prctl runs between fork and exec
            ).result()
        finally:
            if not isinstance(out, int):
                out.close()
        atexit.register(self.stop)

    def _wait(self, ready: Callable[[], bool], failure: str = "did not answer in time"
              ) -> None:
        """Wait until ``ready``; the server is stopped if it never gets there."""
        assert self._process is not None
        try:
            wait_ready(self._process, ready, name=self.name, where=self.where(),
                       log=self._log, timeout_s=self.start_timeout_s, poll_s=self.poll_s,
                       error=self.error, failure=failure)
        except BaseException:
            self.exit_at_start = self._process.poll()  # None: stopped here, still running
            self.stop()
            raise

    def _start_on_picked_ports(self, start_once: Callable[[], None],
                               repick: Callable[[], None] | None) -> None:
        """``start_once`` (spawn, wait); when the server exits at start or another answers
        on its port (:class:`PortTaken`), and ``repick`` may give it other ports (ports
        picked here, never served on), pick and try again, up to :data:`PORT_PICKS` times.
        A free port is picked by binding port 0, and the server binds it a moment later:
        in between another process can take it (another server starting, an outgoing
        connection: both draw from the ephemeral range)."""
        picks = PORT_PICKS if repick is not None else 1
        for pick in range(1, picks + 1):
            self.exit_at_start = None
            try:
                start_once()
                return
            except EchoMQError as exc:
                taken = self.exit_at_start is not None or isinstance(exc, PortTaken)
                if repick is None or pick == picks or not taken:
                    raise
                repick()

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM, wait, then SIGKILL: the server saves nothing it was not asked to."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(self.stop_timeout_s if timeout is None else timeout)
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
        """Stop (or kill) and start again on the same ports and folder."""
        if hard:
            self.kill()
        else:
            self.stop()
        self.start()

    def cleanup(self) -> None:
        """Stop, and remove the folder when this object made it."""
        self.stop()
        if self._owned_dir is not None:
            shutil.rmtree(self._owned_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def log_tails(logs: list[tuple[str, Path]], lines: int) -> str:
    """The last ``lines`` of each named log, for an error that says what the servers saw
    (a failover's elections, lost links)."""
    parts = []
    for name, log in logs:
        try:
            tail = log.read_text(errors="replace").splitlines()[-lines:]
        except OSError as exc:
            tail = [f"(no log: {exc})"]
        parts.append("\n".join([f"{name}:", *tail]))
    return "\n".join(parts)


class Deployment:
    """Several server processes started and stopped as one (a local Cluster, a Sentinel
    set): a context manager whose :meth:`cleanup` stops every process and removes the
    folder it made. Subclasses start them and list them in :meth:`processes`."""

    def __init__(self, data_dir: str | Path | None, prefix: str) -> None:
        self._owned = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix=prefix)).resolve()

    def start(self) -> Self:
        raise NotImplementedError

    def processes(self) -> list[ServerProcess]:
        raise NotImplementedError

    def _forget_processes(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        for process in self.processes():
            process.stop()

    @staticmethod
    def _poll(done: Callable[[], bool], timeout_s: float, failure: str) -> None:
        """Until ``done()`` holds; ``ConnectionFailed(failure)`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise ConnectionFailed(failure)
            time.sleep(0.1)

    def cleanup(self) -> None:
        for process in self.processes():
            process.cleanup()
        self._forget_processes()
        if self._owned:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class Foreground(Protocol):
    """What :func:`run_in_foreground` runs: one server or a deployment of several."""

    def start(self) -> object: ...

    def running(self) -> bool: ...

    def cleanup(self) -> None: ...


def run_in_foreground(server: Foreground, banner: Callable[[], list[str]]) -> None:
    """Start ``server``, print ``banner()``, and run until Ctrl-C, SIGTERM or the server's
    own end, then stop it and remove the folder it made (it never outlives its launcher
    by design)."""

    def on_term(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # stop the server too, not just this launcher
    try:
        server.start()
        for line in banner():
            print(line, flush=True)
        while server.running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.cleanup()
