"""Facts about servers the tests need: a server's identity, a URL nobody answers, and a
folder in memory for a Cluster's nodes."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from redis.cluster import RedisCluster


def run_id(client: redis.Redis, key: str | None = None) -> str:
    """The server's run id: a restart (even on the same port) changes it. On a Cluster,
    the run id of the primary that holds ``key``'s slot (the one that ran its Lua)."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key) if key else client.get_default_node()
        return str(client.info("server", target_nodes=node)["run_id"])
    return str(client.info("server")["run_id"])


def closed_url() -> str:
    """A redis:// URL nothing listens on (a port just freed by the OS)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


@contextmanager
def memory_folder(prefix: str) -> Iterator[Path]:
    """A folder on tmpfs (``/dev/shm``) where there is one, else in the temp folder, removed
    after. A Cluster node fsyncs its ``nodes.conf`` at start and at every epoch change,
    from its one thread: on a disk the rest of the suite keeps busy, one such fsync took
    17 s, the node answered nothing meanwhile, and its start timed out."""
    shm = Path("/dev/shm")
    where = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
