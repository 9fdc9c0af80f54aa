"""Declared streams: the queues whose outcome stream is recorded and archived.

Declaring sets ``stream = 1`` in the queue's meta hash (the queue's Lua reads it to also
record dead-letters) and adds the queue to one global set the scheduler folds. The
driver folds and trims declared streams only: an undeclared stream may belong to a
reader that is not the archive, so it is never trimmed.
"""

from __future__ import annotations

from typing import Any

import redis

from echomq.queue.keys import DECLARED_SET, Keys


def client(conn: Any) -> redis.Redis:
    """The redis-py client of a :class:`~echomq.queue.connection.Connection` (or a client)."""
    return conn.redis if hasattr(conn, "redis") else conn  # type: ignore[no-any-return]


def declare(conn: Any, queue: str) -> None:
    """Record every outcome of ``queue`` (dead-letters included) and archive its stream."""
    keys = Keys(queue)
    pipe = client(conn).pipeline(transaction=True)
    pipe.hset(keys.meta, "stream", "1")
    pipe.sadd(DECLARED_SET, queue)
    pipe.execute()


def undeclare(conn: Any, queue: str) -> None:
    """Stop archiving ``queue``; its stream and what the archive already holds stay."""
    keys = Keys(queue)
    pipe = client(conn).pipeline(transaction=True)
    pipe.hdel(keys.meta, "stream")
    pipe.srem(DECLARED_SET, queue)
    pipe.execute()


def is_declared(conn: Any, queue: str) -> bool:
    return client(conn).hget(Keys(queue).meta, "stream") == "1"


def declared_queues(conn: Any) -> list[str]:
    """Every declared queue, sorted (only those whose meta still says so)."""
    r = client(conn)
    names = sorted(str(n) for n in r.smembers(DECLARED_SET))
    if not names:
        return []
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.hget(Keys(name).meta, "stream")
    return [n for n, flag in zip(names, pipe.execute(), strict=True) if flag in ("1", b"1")]
