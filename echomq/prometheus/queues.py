"""Which queues a scrape reports: the declared ones, the floor's, and those a SCAN finds.

A queue exists in Redis as keys, with no registry beyond the declared set (queues whose
outcome stream is archived). Every queue that was ever added to has a ``seq`` counter
(``<prefix>:{q}:seq``, bumped by every fresh add), so a SCAN for that pattern finds the
undeclared ones. The SCAN is bounded per scrape and resumes where the last one stopped:
a scrape never walks a big keyspace at once; a new undeclared queue shows up within a
full pass (a few scrapes on a keyspace of a million keys), a declared one at once. After
a full pass the SCAN rests for ``RESCAN_SECONDS``, so a small keyspace is not walked on
every scrape. A queue the SCAN found stays reported until a full pass no longer sees it.
On a Cluster a pass walks every primary, each with its own cursor (:class:`KeyspaceScan`).
"""

from __future__ import annotations

import threading
import time
import weakref

from echomq.queue.connection import Connection
from echomq.queue.keys import every_queue
from echomq.queue.scan import KeyspaceScan

SCAN_COUNT = 5000
"""Keys a SCAN call examines (the COUNT hint)."""
SCAN_CALLS = 20
"""SCAN calls per scrape: at most ~100,000 keys examined per scrape."""
RESCAN_SECONDS = 30.0
"""How long the SCAN rests after a full pass (declared queues are read at every scrape)."""


class QueueFinder:
    """The queues of one connection's prefix, found incrementally across scrapes."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        pattern, self._name = every_queue(conn.prefix, "seq")
        self._scan = KeyspaceScan(conn.redis, pattern, count=SCAN_COUNT)
        self._this_pass: set[str] = set()
        self._last_pass: set[str] = set()
        self._rest_until = 0.0
        self._lock = threading.Lock()

    @property
    def skipped(self) -> int:
        """Keys under the prefix that are not UTF-8 (another writer's), skipped by the
        last complete pass (:class:`KeyspaceScan`)."""
        return self._scan.skipped

    def found(self, calls: int = SCAN_CALLS) -> set[str]:
        """The declared queues and every queue the SCAN has seen, after ``calls`` more
        SCAN steps."""
        declared = {str(q) for q in self.conn.redis.smembers(self.conn.declared_set)}
        with self._lock:
            if time.monotonic() < self._rest_until:
                calls = 0
            for _ in range(calls):
                keys, done = self._scan.step()
                for key in keys:
                    match = self._name.match(key)
                    if match:
                        self._this_pass.add(match.group(1))
                if done:
                    self._last_pass, self._this_pass = self._this_pass, set()
                    self._rest_until = time.monotonic() + RESCAN_SECONDS
                    break
            return declared | self._last_pass | self._this_pass


_FINDERS: weakref.WeakKeyDictionary[Connection, QueueFinder] = weakref.WeakKeyDictionary()
_FINDERS_LOCK = threading.Lock()


def finder_for(conn: Connection) -> QueueFinder:
    """One finder per connection, so that successive scrapes resume one SCAN."""
    with _FINDERS_LOCK:
        found = _FINDERS.get(conn)
        if found is None:
            found = _FINDERS[conn] = QueueFinder(conn)
        return found
