"""A SCAN of the whole keyspace, a bounded step at a time, on one server or a Cluster.

What spans queues (the Prometheus finder, the dashboard's discovery, :func:`queues`)
finds them by SCAN, since a queue has no registry beyond its keys. A SCAN cursor belongs
to the node that gave it: on a Cluster each primary holds its own slots and its own
cursor, and one cursor sent to every node (what ``RedisCluster.scan`` does with a plain
cursor) skips or repeats keys. :class:`KeyspaceScan` walks the primaries one after the
other, each with its own cursor, and keeps its place between calls, so a caller can take
a few steps per scrape and resume; a pass is complete once every primary said 0.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.client import NEVER_DECODE
from redis.cluster import RedisCluster

RAW = {NEVER_DECODE: True}
"""The option that has redis-py hand a reply over undecoded (the keys as bytes)."""


class KeyspaceScan:
    """One resumable SCAN over every primary of ``client`` (the server itself when it is
    not a Cluster), for keys matching ``match`` (and of type ``type_`` when given).

    Keys come back as bytes and are decoded here: a key that is not UTF-8 (another
    writer's, under the same prefix) is skipped and counted (``skipped``: in the last
    complete pass, or in this one while none completed), instead of failing the whole
    reply in a client that decodes every reply."""

    def __init__(self, client: Any, match: str, *, count: int,
                 type_: str | None = None) -> None:
        self.client = client
        self.match = match
        self.count = count
        self.type_ = type_
        self._nodes: list[str] = []  # the primaries of this pass, by name
        self._cursor = 0
        self._skipping = 0  # foreign keys seen in this pass
        self._skipped: int | None = None  # in the last complete pass

    @property
    def skipped(self) -> int:
        """Keys skipped as not UTF-8: in the last complete pass (this one before)."""
        return self._skipping if self._skipped is None else self._skipped

    def _decoded(self, keys: list[Any]) -> list[str]:
        found = []
        for key in keys:
            try:
                found.append(key.decode() if isinstance(key, bytes) else str(key))
            except UnicodeDecodeError:
                self._skipping += 1
        return found

    def _ended(self) -> None:
        self._skipped, self._skipping = self._skipping, 0

    def step(self) -> tuple[list[str], bool]:
        """One SCAN call: the keys it returned, and True when it ended a full pass (the
        next step starts a new one)."""
        if not isinstance(self.client, RedisCluster):
            cursor, keys = self.client.scan(self._cursor, match=self.match,
                                            count=self.count, _type=self.type_, **RAW)
            self._cursor = int(cursor)
            found = self._decoded(keys)
            if self._cursor == 0:
                self._ended()
            return found, self._cursor == 0
        if not self._nodes:
            primaries: list[Any] = self.client.get_primaries()  # type: ignore[no-untyped-call]
            self._nodes = sorted(n.name for n in primaries)
            self._cursor = 0
        found = self._decoded(self._cluster_step(self._nodes[0]))
        if self._cursor == 0:
            self._nodes.pop(0)
        if not self._nodes:
            self._ended()
        return found, not self._nodes

    def _cluster_step(self, name: str) -> list[Any]:
        """SCAN ``name`` from this pass's cursor. A node that is gone or no longer a
        primary (a failover mid-pass) ends its part of the pass: its slots' new primary
        is walked by the next pass."""
        node = self.client.get_node(node_name=name)
        if node is None or node.server_type != "primary":
            self._cursor = 0
            return []
        try:
            cursors, keys = self.client.scan(self._cursor, match=self.match,
                                             count=self.count, _type=self.type_,
                                             target_nodes=node, **RAW)
        except (redis.ConnectionError, redis.TimeoutError):
            self._cursor = 0
            return []
        self._cursor = int(cursors[name])
        return list(keys)

    def full_pass(self) -> list[str]:
        """Every key a whole pass from here finds (from the start when nothing ran)."""
        found: list[str] = []
        while True:
            keys, done = self.step()
            found.extend(keys)
            if done:
                return found
