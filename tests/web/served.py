"""``emq dashboard`` in its own process, on a free port, for the tests that need the real
command (the browser, where the token comes from)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from echomq.servers import free_port
from tests.support import ROOT


@dataclass
class Served:
    """A running dashboard: its base URL and, once it stopped, what it printed."""

    url: str
    stdout: str = ""
    stderr: str = ""


@contextmanager
def dashboard(server_url: str, *args: str, env: dict[str, str] | None = None
              ) -> Iterator[Served]:
    """Serve ``emq --url server_url dashboard --port PORT *args`` until the block ends."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", server_url, "--log-level", "WARNING",
         "dashboard", "--port", str(port), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})})
    served = Served(f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            out, err = process.communicate()
            raise AssertionError(f"the dashboard did not start: {out}{err}")
        time.sleep(0.05)
    try:
        yield served
    finally:
        process.terminate()
        served.stdout, served.stderr = process.communicate(timeout=30)


def status(url: str, **headers: str) -> int:
    """The HTTP status of a GET of ``url`` (redirects not followed: a login page is a 303)."""
    class Stay(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.build_opener(Stay).open(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
