"""moto's S3 in server mode: no credentials, but the same conditional-write semantics as
SeaweedFS, which is why the remote contract runs against both (tests only)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from echomq.servers.process import free_port
from echomq.servers.s3 import S3Process


class MotoS3(S3Process):
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

        def answer() -> None:  # on a port of its own each time, restarts included
            self.port = free_port(self.host)
            argv = [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]
            self._spawn(argv, log=self.log_dir / f"moto-{self.port}.log", env=dict(os.environ))
            self._wait(self._answers)

        self._start_on_picked_ports(answer, repick=lambda: None)
        return self
