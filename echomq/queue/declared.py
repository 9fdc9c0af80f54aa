"""Declared streams: the queues whose outcome stream is recorded and archived.

Declaring sets ``stream = 1`` in the queue's meta hash (the queue's Lua reads it to also
record dead-letters) and adds the queue to one global set the scheduler folds. The
driver folds and trims declared streams only: an undeclared stream may belong to a
reader that is not the archive, so it is never trimmed.

A declared stream also names its *archive of record* (the ``archive`` field of the meta
hash): the one store whose copy makes trimming safe. It is an address, ``s3://bucket/prefix
at endpoint`` for a remote or ``floor:<id>`` for one floor (its own id, kept inside it).
It is set by ``declare(conn, q, archive=remote_or_floor)``, or, when nobody declared one,
claimed by the first driver that trims and claims (atomically, inside the fenced trim): a
driver with a remote claims unasked, a floor alone only when told to
(``Driver(claim_custody=True)``, ``emq archive fold --claim-custody``), so a one-off local
fold never takes the stream from the deployment's archive. A driver that writes neither
to it (or does not claim an unset one) may fold into its own floor but never trims, and
says so.

These are queue keys the queue's Lua reads, so they live in the substrate: the Consumer
(``record=True``) and the archive both declare through here. The archive's objects name
themselves (:class:`ArchiveOfRecord`), so nothing here knows a floor or a remote.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from echomq.errors import InvalidArgument
from echomq.queue.connection import Connection

RECORD_PAYLOAD = "record_payload"
"""The meta hash's field the settle scripts read (with ``stream``, in one HMGET): '1'
records each job's name and payload with its outcome."""


@runtime_checkable
class ArchiveOfRecord(Protocol):
    """A store that can be a stream's archive of record (a Floor, a Remote)."""

    def record_address(self) -> str:
        """The address the meta hash records for this store."""
        ...


def record_address(target: str | ArchiveOfRecord) -> str:
    """The archive-of-record address of a remote, a floor, or an address string."""
    if isinstance(target, str):
        if not target.strip() or any(ord(c) < 32 for c in target):
            raise InvalidArgument(f"an archive of record must be a printable address, "
                                  f"got {target!r}")
        return target
    if isinstance(target, ArchiveOfRecord):
        return target.record_address()
    raise InvalidArgument(f"an archive of record is a Remote, a Floor or an address, "
                          f"got {type(target).__name__}")


def declare(conn: Connection, queue: str, archive: str | ArchiveOfRecord | None = None,
            *, payload: bool | None = None) -> None:
    """Record every outcome of ``queue`` (dead-letters included) and archive its stream.

    ``archive`` (a Remote, a Floor, or an address) becomes the stream's archive of record,
    replacing any earlier one; without it the record stays as it is (none: the first
    driver with a remote that trims claims it; a floor-only driver only when told to).
    ``payload=True`` also records each job's name and payload with its outcome (what
    ``archive.replay`` needs; off by default: payloads can be large or sensitive),
    ``False`` stops it, ``None`` keeps what was declared, so a recording Consumer's
    declare never turns it off.
    """
    keys = conn.keys(queue)
    record = None if archive is None else record_address(archive)
    if payload is not None and not isinstance(payload, bool):
        raise InvalidArgument(f"payload must be True, False or None, got {payload!r}")
    # The declared set is one key per prefix (another slot on a Cluster): two steps.
    # The set first: a crash between them leaves a member whose meta does not say
    # "stream", which declared_queues() skips; the other order could leave a queue
    # writing its stream that no archive driver ever folds (nor trims).
    conn.redis.sadd(conn.declared_set, queue)
    pipe = conn.redis.pipeline(transaction=True)  # one key: the queue's meta hash
    pipe.hset(keys.meta, "stream", "1")
    if record is not None:
        pipe.hset(keys.meta, "archive", record)
    if payload is True:
        pipe.hset(keys.meta, RECORD_PAYLOAD, "1")
    elif payload is False:
        pipe.hdel(keys.meta, RECORD_PAYLOAD)
    pipe.execute()


def records_payload(conn: Connection, queue: str) -> bool:
    """Do ``queue``'s outcome entries carry the job's name and payload?"""
    return bool(conn.redis.hget(conn.keys(queue).meta, RECORD_PAYLOAD) == "1")


def archive_of_record(conn: Connection, queue: str) -> str | None:
    """The address of ``queue``'s archive of record (None: not set yet)."""
    value = conn.redis.hget(conn.keys(queue).meta, "archive")
    return None if value is None else str(value)


def undeclare(conn: Connection, queue: str) -> None:
    """Stop archiving ``queue`` (payload recording too); its stream and what the archive
    already holds stay."""
    keys = conn.keys(queue)
    # The mirror of declare(): the meta first, so a crash between the two commands
    # leaves a set member declared_queues() skips, never a declared queue outside it.
    conn.redis.hdel(keys.meta, "stream", RECORD_PAYLOAD)
    conn.redis.srem(conn.declared_set, queue)


def is_declared(conn: Connection, queue: str) -> bool:
    return bool(conn.redis.hget(conn.keys(queue).meta, "stream") == "1")


def declared_queues(conn: Connection) -> list[str]:
    """Every declared queue, sorted (only those whose meta still says so)."""
    names = sorted(str(n) for n in conn.redis.smembers(conn.declared_set))
    if not names:
        return []
    pipe = conn.redis.pipeline(transaction=False)
    for name in names:
        pipe.hget(conn.keys(name).meta, "stream")
    return [n for n, flag in zip(names, pipe.execute(), strict=True) if flag in ("1", b"1")]
