"""Declared streams: the queues whose outcome stream is recorded and archived.

Declaring sets ``stream = 1`` in the queue's meta hash (the queue's Lua reads it to also
record dead-letters) and adds the queue to one global set the scheduler folds. The
driver folds and trims declared streams only: an undeclared stream may belong to a
reader that is not the archive, so it is never trimmed.

A declared stream also names its *archive of record* (the ``archive`` field of the meta
hash): the one store whose copy makes trimming safe. It is an address, ``s3://bucket/prefix
at endpoint`` for a remote or ``floor:<id>`` for one floor (its own id, kept inside it).
It is set by ``declare(conn, q, archive=remote_or_floor)``, or, when nobody declared one,
claimed by the first driver that trims (atomically, inside the fenced trim). A driver that
writes neither to it may fold into its own floor but never trims, and says so.
"""

from __future__ import annotations

from typing import Any

import redis

from echomq.errors import InvalidArgument
from echomq.queue.keys import DECLARED_SET, Keys


def client(conn: Any) -> redis.Redis:
    """The redis-py client of a :class:`~echomq.queue.connection.Connection` (or a client)."""
    return conn.redis if hasattr(conn, "redis") else conn  # type: ignore[no-any-return]


def record_address(target: Any) -> str:
    """The archive-of-record address of a remote, a floor, or an address string."""
    if isinstance(target, str):
        if not target.strip() or any(ord(c) < 32 for c in target):
            raise InvalidArgument(f"an archive of record must be a printable address, "
                                  f"got {target!r}")
        return target
    if hasattr(target, "identity"):  # a Floor
        return f"floor:{target.identity()}"
    if hasattr(target, "address"):  # a Remote
        endpoint = getattr(target, "endpoint_url", None)
        return str(target.address("")) + (f" at {endpoint}" if endpoint else "")
    raise InvalidArgument(f"an archive of record is a Remote, a Floor or an address, "
                          f"got {type(target).__name__}")


def declare(conn: Any, queue: str, archive: Any = None) -> None:
    """Record every outcome of ``queue`` (dead-letters included) and archive its stream.

    ``archive`` (a Remote, a Floor, or an address) becomes the stream's archive of record,
    replacing any earlier one; without it the record stays as it is (none: the first
    driver that trims claims it).
    """
    keys = Keys(queue)
    record = None if archive is None else record_address(archive)
    pipe = client(conn).pipeline(transaction=True)
    pipe.hset(keys.meta, "stream", "1")
    if record is not None:
        pipe.hset(keys.meta, "archive", record)
    pipe.sadd(DECLARED_SET, queue)
    pipe.execute()


def archive_of_record(conn: Any, queue: str) -> str | None:
    """The address of ``queue``'s archive of record (None: not set yet)."""
    value = client(conn).hget(Keys(queue).meta, "archive")
    return None if value is None else str(value)


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
