"""Every queue of a prefix: what ``emq queues`` lists and ``emq status`` reports.

A queue has no registry beyond its keys: the prefix's sets name the declared, retained
and scheduled (cron) queues, and every queue ever added to keeps a ``seq`` counter
(``<prefix>:{q}:seq``), found by a SCAN of every primary (:class:`KeyspaceScan`, one
cursor per node on a Cluster). Nothing here touches two queues' slots in one command.
"""

from __future__ import annotations

from echomq.queue.connection import Connection
from echomq.queue.keys import every_queue
from echomq.queue.scan import KeyspaceScan

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
    for key in KeyspaceScan(conn.redis, pattern, count=SCAN_COUNT).full_pass():
        found = name.match(key)
        if found:
            names.add(found.group(1))
    return sorted(names)
