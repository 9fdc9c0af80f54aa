"""A private Valkey (``EmbeddedValkey``) lives exactly as long as its owner: it dies with
an owner killed -9, and it does not die with the thread that happened to start it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import echomq
from echomq.servers.process import pid_alive
from echomq.servers.valkey import EmbeddedValkey
from tests.support.waits import wait_until

_OWNER = """
import sys, time
from echomq.servers.valkey import EmbeddedValkey
server = EmbeddedValkey(sys.argv[1]).start()
print(server.pid, flush=True)
time.sleep(120)
"""


def test_a_private_server_dies_with_its_owner_killed_9(tmp_path: Path) -> None:
    with subprocess.Popen([sys.executable, "-c", _OWNER, str(tmp_path)],
                          stdout=subprocess.PIPE, text=True) as owner:
        try:
            assert owner.stdout is not None
            pid = int(owner.stdout.readline())
            assert pid_alive(pid)
        finally:
            owner.kill()  # SIGKILL: no atexit, no cleanup in the owner
    wait_until(lambda: not pid_alive(pid), timeout=10)


def test_a_private_server_started_from_a_thread_outlives_that_thread(tmp_path: Path) -> None:
    """The parent-death signal follows the forking thread: servers fork from one that lasts."""
    started: list[EmbeddedValkey] = []
    helper = threading.Thread(target=lambda: started.append(EmbeddedValkey(tmp_path).start()))
    helper.start()
    helper.join()
    [server] = started
    try:
        time.sleep(0.5)  # a signal sent at the helper's exit would have landed by now
        assert server.running()
        conn = echomq.connect(server.url)
        assert conn.redis.ping()
        conn.close()
    finally:
        server.cleanup()
