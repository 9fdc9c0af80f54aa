"""Facts about servers the tests need: a server's identity, and a URL nobody answers."""

from __future__ import annotations

import socket

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
