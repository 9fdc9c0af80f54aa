"""Moved to :mod:`echomq.servers` (``valkey``: the private server; ``shared``: a folder's
shared one); this name stays for the code and tests that import it."""

from echomq.servers.process import free_port, pid_alive
from echomq.servers.shared import LOCK_FILE, LOCK_TIMEOUT_S, STATE_FILE, ServerInfo, SharedValkey
from echomq.servers.valkey import (
    DATA_DIR_ENV,
    LOG_FILE,
    START_TIMEOUT_S,
    EmbeddedValkey,
    data_folder,
    main,
    server_argv,
    valkey_binary,
)

__all__ = [
    "DATA_DIR_ENV",
    "LOCK_FILE",
    "LOCK_TIMEOUT_S",
    "LOG_FILE",
    "START_TIMEOUT_S",
    "STATE_FILE",
    "EmbeddedValkey",
    "ServerInfo",
    "SharedValkey",
    "data_folder",
    "free_port",
    "main",
    "pid_alive",
    "server_argv",
    "valkey_binary",
]
