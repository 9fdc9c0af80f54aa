"""The real servers the project starts: Valkey (private or a folder's shared one),
SeaweedFS and moto (S3, for development and tests), on one process lifecycle
(:class:`~echomq.servers.process.ServerProcess`).

The launchers load on first use: ``SeaweedS3`` brings boto3, which a worker never needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from echomq.errors import LauncherError
    from echomq.servers.moto import MotoS3
    from echomq.servers.process import ServerProcess, free_port, pid_alive
    from echomq.servers.seaweed import SeaweedS3
    from echomq.servers.shared import ServerInfo, SharedValkey
    from echomq.servers.valkey import EmbeddedValkey

_HOMES = {
    "EmbeddedValkey": "echomq.servers.valkey",
    "SharedValkey": "echomq.servers.shared",
    "ServerInfo": "echomq.servers.shared",
    "SeaweedS3": "echomq.servers.seaweed",
    "MotoS3": "echomq.servers.moto",
    "ServerProcess": "echomq.servers.process",
    "LauncherError": "echomq.errors",
    "free_port": "echomq.servers.process",
    "pid_alive": "echomq.servers.process",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'echomq.servers' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


__all__ = [
    "EmbeddedValkey",
    "LauncherError",
    "MotoS3",
    "SeaweedS3",
    "ServerInfo",
    "ServerProcess",
    "SharedValkey",
    "free_port",
    "pid_alive",
]
