"""Moved to :mod:`echomq.servers.seaweed` and :mod:`echomq.servers.moto` (development
launchers do not belong in the archive); this name stays for the code and tests that
import it."""

from echomq.errors import LauncherError
from echomq.servers.moto import MotoS3
from echomq.servers.seaweed import (
    DEFAULT_ACCESS_KEY,
    DEFAULT_SECRET_KEY,
    PROBE_BUCKET,
    SeaweedS3,
    weed_binary,
)

__all__ = [
    "DEFAULT_ACCESS_KEY",
    "DEFAULT_SECRET_KEY",
    "PROBE_BUCKET",
    "LauncherError",
    "MotoS3",
    "SeaweedS3",
    "weed_binary",
]
