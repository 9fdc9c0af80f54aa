"""The Cluster client: redis-py's ``RedisCluster``, routing ``FCALL`` without a lookup.

redis-py finds the keys of a command with movable keys (``FCALL``) by asking the server
(``COMMAND GETKEYS``): one more round trip for every transition on the functions
executor. ``FCALL name numkeys key...`` names its keys as ``EVALSHA`` does, so they are
read from the arguments here, as redis-py already does for ``EVALSHA``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException


class EchoCluster(RedisCluster):
    """``RedisCluster`` that reads an ``FCALL``'s keys from its arguments."""

    def determine_slot(self, *args: Any) -> Any:
        command = str(args[0]).upper()
        if command in ("FCALL", "FCALL_RO") and len(args) > 3 and int(args[2]) > 0:
            keys = args[3:3 + int(args[2])]
            slots = {self.keyslot(k) for k in keys}  # type: ignore[no-untyped-call]
            if len(slots) != 1:
                raise RedisClusterException(
                    f"{command} - all keys must map to the same key slot")
            return slots.pop()
        return super().determine_slot(*args)


def scan_slot(client: Any, match: str, count: int, key: str) -> Iterator[str]:
    """SCAN for ``match`` where ``key``'s slot lives: on a Cluster only the primary
    holding that slot (a queue's keys all share its ``{queue}`` slot), on one server
    the server."""
    if isinstance(client, RedisCluster):
        node = client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        yield from (str(k) for k in client.scan_iter(match=match, count=count,
                                                      target_nodes=node))
    else:
        yield from (str(k) for k in client.scan_iter(match=match, count=count))


def slot_time(client: Any, key: str) -> tuple[int, int]:
    """``TIME`` (seconds, microseconds) of the server holding ``key``'s slot: the clock
    that scores that queue's sets."""
    if isinstance(client, RedisCluster):
        secs, micros = client.time(
            target_nodes=client.get_node_from_key(key))  # type: ignore[no-untyped-call]
    else:
        secs, micros = client.time()
    return int(secs), int(micros)


def slot_ms(client: Any, key: str) -> int:
    """:func:`slot_time` in epoch milliseconds."""
    secs, micros = slot_time(client, key)
    return secs * 1000 + micros // 1000

