"""Many drivers over one deployment's declared queues: who is alive, and a fair share.

Each driver that folds every declared queue (``Driver.fold_declared``) sends its heartbeat
into one sorted set per prefix, scored by when it lapses on the server clock. The number of
live drivers gives each its fair share of the queues, ``ceil(queues / drivers)``: a driver
keeps the fold leases of the queues it folded between passes (that is what keeps a queue
on one floor), takes a free queue only while under its share, and gives back what it holds
beyond it, so a driver that joins finds queues to take. A driver that dies stops its heartbeat
and its leases lapse: within one lease another driver takes its queues.

:class:`Roster` is the set of live drivers; :class:`Share` is one driver's part: the
passes of ``fold_declared`` and the leases a driver keeps between them.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import zlib
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace

import redis

from echomq.archive.fold_lease import FoldLease
from echomq.archive.report import FoldReport
from echomq.errors import (
    ArchiveError,
    ConnectionFailed,
    InvalidArgument,
    LeaseHeld,
    LeaseLost,
    StreamUnavailable,
)
from echomq.queue.cluster import slot_ms
from echomq.queue.connection import Connection
from echomq.queue.declared import declared_queues
from echomq.queue.keys import archive_drivers

log = logging.getLogger("echomq.archive.driver")  # one name for all a driver logs
REDIS_FAILED = (redis.RedisError, ConnectionFailed)
"""A Redis failure: a raw client's, or one the executor (the fold lease's scripts) named."""


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

    def heartbeat(self) -> int:
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
        """The names of the drivers whose heartbeat has not lapsed."""
        now = slot_ms(self.redis, self.key)
        return sorted(str(n) for n in self.redis.zrangebyscore(self.key, f"({now}", "+inf"))


def fair_share(queues: int, drivers: int) -> int:
    """How many queues one of ``drivers`` live drivers keeps."""
    return max(1, math.ceil(queues / max(1, drivers)))


class Share:
    """One driver's part in sharing the declared queues (``Driver.fold_declared``): the
    leases it keeps between passes, up to its fair share, and the queues it leaves alone.

    ``lease(queue)`` makes this driver's (unacquired) fold lease of a queue; ``fold(queue,
    keep)`` folds one without waiting for its lease, keeping the lease after when ``keep``;
    ``not_ours(queue)`` says why a queue's archive of record is not this driver's to fold.
    """

    def __init__(self, conn: Connection, roster: Roster, lease_ms: int, token: str,
                 lease: Callable[[str], FoldLease],
                 fold: Callable[[str, bool], FoldReport],
                 not_ours: Callable[[str], str | None]) -> None:
        self.conn = conn
        self.redis = conn.redis
        self.roster = roster
        self.lease_ms = lease_ms
        self.token = token
        self.lease = lease
        self.fold = fold
        self.not_ours = not_ours
        self.held: list[str] = []  # queues whose lease this driver keeps between passes
        self._renewed = time.monotonic()

    def run(self) -> dict[str, FoldReport]:
        """One pass over every declared queue (see ``Driver.fold_declared``)."""
        queues = declared_queues(self.conn)
        share = fair_share(len(queues), self.roster.heartbeat())
        self._renewed = time.monotonic()
        declared = set(queues)
        for queue in [q for q in self.held if q not in declared]:  # undeclared since
            self.let_go(queue)
        reports: dict[str, FoldReport] = {}
        for queue in self._order(queues):
            self._keep_held()
            mine = queue in self.held
            if not mine and len(self.held) >= share:
                reports[queue] = FoldReport(queue, skipped=(
                    f"this driver keeps its fair share, {share} of {len(queues)} queues"))
                continue
            keep = self.held.index(queue) < share if mine else True
            reports[queue] = self._fold_one(queue, mine, keep)
        return self._name_holders(reports)

    def _fold_one(self, queue: str, mine: bool, keep: bool) -> FoldReport:
        """One queue of a pass: its report, the lease kept or given back."""
        try:
            reason = None if mine else self.not_ours(queue)
            if reason is not None:
                return FoldReport(queue, skipped=reason)
            report = self.fold(queue, keep)
        except LeaseHeld:
            self._forget(queue)
            return FoldReport(queue, skipped="another driver holds its fold lease")
        except (ArchiveError, *REDIS_FAILED) as exc:
            self._forget(queue)
            log.warning("archive fold of %r failed: %s", queue, exc)
            if not isinstance(exc, ArchiveError):
                exc = StreamUnavailable(f"the Redis server failed before folding {queue!r}: "
                                        f"{exc}")
            found: FoldReport | None = getattr(exc, "report", None)
            return found or FoldReport(queue, error=repr(exc))
        if keep and queue not in self.held:
            self.held.append(queue)
        elif not keep:
            self._forget(queue)
        return report

    def _keep_held(self) -> None:
        """Renew every kept lease and this driver's heartbeat once a third of a lease has gone
        by, so a pass longer than the lease neither lets this driver's other queues lapse
        to other floors nor has the others count it gone."""
        now = time.monotonic()
        if now - self._renewed < self.lease_ms / 3000:
            return
        self._renewed = now
        with suppress(*REDIS_FAILED):
            self.roster.heartbeat()
        for queue in list(self.held):
            try:
                self.lease(queue).renew()
            except LeaseLost:
                self._forget(queue)
            except REDIS_FAILED:
                return  # the folds of this pass report the failure, queue by queue

    def _order(self, queues: list[str]) -> list[str]:
        """The queues this driver holds first (in the order it took them), then the
        others from a place of its own, so drivers started together try different ones."""
        held = [q for q in self.held if q in queues]
        others = [q for q in queues if q not in self.held]
        if others:
            start = zlib.crc32(self.token.encode()) % len(others)
            others = others[start:] + others[:start]
        return held + others

    def _name_holders(self, reports: dict[str, FoldReport]) -> dict[str, FoldReport]:
        """Fill ``held_by`` of the skipped queues from their lease tokens (one pipeline)."""
        skipped = [q for q, r in reports.items() if r.skipped is not None]
        if not skipped:
            return reports
        pipe = self.redis.pipeline(transaction=False)
        for queue in skipped:
            pipe.get(self.conn.keys(queue).archive_lease)
        with suppress(*REDIS_FAILED):
            for queue, token in zip(skipped, pipe.execute(), strict=True):
                reports[queue] = replace(reports[queue], held_by=holder_name(token))
        return reports

    def let_go(self, queue: str) -> None:
        """Give back a lease a pass kept."""
        self._forget(queue)
        self.lease(queue).release()

    def leave(self) -> None:
        """Give back every kept lease, so other drivers take the queues at once, and
        leave the roster (a clean stop)."""
        with suppress(*REDIS_FAILED):
            for queue in list(self.held):
                self.let_go(queue)
            self.roster.leave()

    def _forget(self, queue: str) -> None:
        with suppress(ValueError):
            self.held.remove(queue)
