"""Every queue of a prefix: what ``emq queues`` lists and ``emq status`` reports.

A queue has no registry beyond its keys: the prefix's sets name the declared, retained
and scheduled (cron) queues, and every queue ever added to keeps a ``seq`` counter
(``<prefix>:{q}:seq``), found by a SCAN of every primary (:class:`KeyspaceScan`, one
cursor per node on a Cluster). Nothing here touches two queues' slots in one command.
A key under the prefix that names no usable queue (not UTF-8, or a name the key builder
refuses: another writer's) is skipped, and the count is logged.
"""

from __future__ import annotations

import logging

from echomq.errors import InvalidKey
from echomq.queue.connection import Connection
from echomq.queue.keys import check_name, every_queue
from echomq.queue.scan import KeyspaceScan

log = logging.getLogger("echomq.queues")

SCAN_COUNT = 5000
"""Keys one SCAN call examines (the COUNT hint)."""


def queues(conn: Connection) -> list[str]:
    """Every queue of ``conn``'s prefix, sorted: declared, retained, with cron
    schedules, or ever added to (a full SCAN: it walks the whole keyspace, so it is for
    an operator's command, not a hot path)."""
    pipe = conn.redis.pipeline(transaction=False)
    for registry in (conn.declared_set, conn.retained_set, conn.cron_set):
        pipe.smembers(registry)
    names = {str(q) for members in pipe.execute() for q in members}
    pattern, name = every_queue(conn.prefix, "seq")
    scan = KeyspaceScan(conn.redis, pattern, count=SCAN_COUNT)
    foreign = 0
    for key in scan.full_pass():
        found = name.match(key)
        if found:
            try:
                names.add(check_name(found.group(1), "queue name"))
            except InvalidKey:
                foreign += 1
    foreign += scan.skipped
    if foreign:
        log.warning("skipped %d key(s) matching %s that name no queue (not UTF-8, or a "
                    "name EchoMQ refuses)", foreign, pattern)
    return sorted(names)
