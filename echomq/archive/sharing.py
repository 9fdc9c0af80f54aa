"""Many drivers over one deployment's declared queues: who is alive, and a fair share.

Each driver that folds every declared queue (``Driver.fold_declared``) beats into one
sorted set per prefix, scored by when its beat lapses on the server clock. The number of
live drivers gives each its fair share of the queues, ``ceil(queues / drivers)``: a driver
keeps the fold leases of the queues it folded between passes (that is what keeps a queue
on one floor), takes a free queue only while under its share, and gives back what it holds
beyond it, so a driver that joins finds queues to take. A driver that dies stops beating
and its leases lapse: within one lease another driver takes its queues.
"""

from __future__ import annotations

import math
import os
import socket

from echomq.errors import InvalidArgument
from echomq.queue.cluster import slot_ms
from echomq.queue.connection import Connection
from echomq.queue.keys import archive_drivers


def default_name() -> str:
    """A driver's name when none is given: where it runs (host and process id)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def check_driver_name(name: str) -> str:
    """A driver's name is printable and has no ``/`` (it prefixes the lease token)."""
    if (not isinstance(name, str) or not name.strip() or "/" in name or len(name) > 200
            or any(ord(c) < 32 for c in name)):
        raise InvalidArgument(f"a driver name is 1 to 200 printable characters without "
                              f"'/', got {name!r}")
    return name


def holder_name(token: str | None) -> str | None:
    """The driver name inside a fold lease's token (``name/random``), if it has one."""
    if not token:
        return None
    name, sep, _ = token.rpartition("/")
    return name if sep else None


class Roster:
    """This driver's entry in the live drivers' set of one prefix."""

    def __init__(self, conn: Connection, name: str, ttl_ms: int) -> None:
        self.redis = conn.redis
        self.key = archive_drivers(conn.prefix)
        self.name = name
        self.ttl_ms = ttl_ms
        self.joined = False

    def beat(self) -> int:
        """Renew this driver's entry, drop lapsed ones; how many drivers are alive."""
        now = slot_ms(self.redis, self.key)
        pipe = self.redis.pipeline(transaction=True)  # one key: one slot
        pipe.zadd(self.key, {self.name: now + self.ttl_ms})
        pipe.zremrangebyscore(self.key, "-inf", now)
        pipe.zcard(self.key)
        alive = max(1, int(pipe.execute()[-1]))
        self.joined = True
        return alive

    def leave(self) -> None:
        """Stop counting this driver (a clean stop; a dead one lapses on its own)."""
        if self.joined:
            self.redis.zrem(self.key, self.name)
            self.joined = False

    def live(self) -> list[str]:
        """The names of the drivers whose beat has not lapsed."""
        now = slot_ms(self.redis, self.key)
        return sorted(str(n) for n in self.redis.zrangebyscore(self.key, f"({now}", "+inf"))


def fair_share(queues: int, drivers: int) -> int:
    """How many queues one of ``drivers`` live drivers keeps."""
    return max(1, math.ceil(queues / max(1, drivers)))
