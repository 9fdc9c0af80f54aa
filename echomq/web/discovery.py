"""Which queues the dashboard lists: the declared set, plus queues found by a bounded SCAN.

There is no registry of every queue (a queue exists once a job is added to it), so the
dashboard learns queues two ways:

- every queue in ``conn.declared_set`` (queues whose outcomes are archived) and in
  ``conn.retained_set`` (queues with a retention policy), always;
- queues seen by an incremental ``SCAN ... TYPE zset`` over ``<prefix>:{*}:*``: each
  refresh walks at most ``budget`` SCAN steps from where the last one stopped, so a
  keyspace of millions of rows never costs one request more than a few milliseconds;
  a full pass replaces the seen set (a queue whose sets are all gone drops out). On a
  Cluster a pass walks every primary, each with its own cursor (:class:`KeyspaceScan`).

The answer is cached for ``ttl_s`` seconds (2 by default), so any number of viewers cost one
refresh (at most ``budget`` SCAN steps) per period.
"""

from __future__ import annotations

import threading
import time

from echomq.errors import InvalidKey
from echomq.queue.connection import Connection
from echomq.queue.keys import check_name, every_queue
from echomq.queue.scan import KeyspaceScan

STATE_SETS = frozenset({"pending", "scheduled", "active", "completed", "dead"})


class QueueDirectory:
    """The queues one connection's prefix holds, learnt a bounded step at a time."""

    def __init__(self, conn: Connection, *, ttl_s: float = 2.0, budget: int = 20,
                 step: int = 5000) -> None:
        self.conn = conn
        self.ttl_s = ttl_s
        self.budget = budget
        self.step = step
        self._lock = threading.Lock()
        self._scan = KeyspaceScan(conn.redis, every_queue(conn.prefix, "*")[0], count=step,
                                  type_="zset")
        self._seen: set[str] = set()  # this pass
        self._known: set[str] = set()  # the last complete pass (and this one so far)
        self._names: list[str] = []
        self._at = float("-inf")
        self._refused = 0  # UTF-8 keys of a name the key builder refuses, this pass
        self.skipped = 0
        """Keys under the prefix that name no queue (not UTF-8, or a refused name), in
        the last complete pass: another writer's, listed by none."""

    def names(self) -> list[str]:
        """Every queue known now, sorted (cached for ``ttl_s``)."""
        with self._lock:
            if time.monotonic() - self._at >= self.ttl_s:
                self._refresh()
                self._at = time.monotonic()
            return list(self._names)

    def _refresh(self) -> None:
        pipe = self.conn.redis.pipeline(transaction=False)
        pipe.smembers(self.conn.declared_set)
        pipe.smembers(self.conn.retained_set)
        declared = {str(q) for members in pipe.execute() for q in members}
        for _ in range(self.budget):
            found, done = self._scan.step()
            for key in found:
                name = self._queue_of(key)
                if name is not None:
                    self._seen.add(name)
            if done:
                self._known, self._seen = self._seen, set()
                self.skipped, self._refused = self._scan.skipped + self._refused, 0
                break
        self._names = sorted(declared | self._known | self._seen)

    def _queue_of(self, key: str) -> str | None:
        """The queue of ``<prefix>:{q}:<state>``, or None for any other key."""
        head = f"{self.conn.prefix}:{{"
        if not key.startswith(head):
            return None
        name, sep, suffix = key[len(head):].partition("}:")
        if not sep or suffix not in STATE_SETS:
            return None
        try:
            return check_name(name, "queue name")
        except InvalidKey:
            self._refused += 1
            return None
