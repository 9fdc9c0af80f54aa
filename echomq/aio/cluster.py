"""The asyncio Cluster client: ``redis.asyncio.cluster.RedisCluster`` routing ``FCALL``
by the keys it names, as :class:`echomq.queue.cluster.EchoCluster` does for the sync one
(redis-py would ask the server, ``COMMAND GETKEYS``: one more round trip per FCALL)."""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException


class AsyncEchoCluster(RedisCluster):
    """``RedisCluster`` (asyncio) that reads an ``FCALL``'s keys from its arguments."""

    async def _determine_slot(self, command: str, *args: Any) -> int:
        if command.upper() in ("FCALL", "FCALL_RO") and len(args) > 2 and int(args[1]) > 0:
            keys = args[2:2 + int(args[1])]
            slots = {self.keyslot(k) for k in keys}
            if len(slots) != 1:
                raise RedisClusterException(
                    f"{command} - all keys must map to the same key slot")
            return slots.pop()
        return await super()._determine_slot(command, *args)
