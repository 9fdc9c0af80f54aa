"""Whole-queue removals: ``drain`` (every waiting job) and ``obliterate`` (every key).

Both run as Lua transitions in batches of at most :data:`BULK_BATCH` deletions per call,
so a queue of a million jobs never holds the server for long: other clients' commands run
between the batches. Each batch is atomic; the whole is not (see each verb for what a
concurrent add or settle meets).
"""

from __future__ import annotations

from collections.abc import Iterator

from echomq.errors import InvalidArgument, QueueBusy
from echomq.queue.cluster import scan_slot
from echomq.queue.connection import Connection
from echomq.queue.flows_across import deliver_outbox
from echomq.queue.keys import Keys
from echomq.queue.transitions import removals
from echomq.queue.transitions.removals import BULK_BATCH

SCAN_PASSES = 3
"""How many SCAN passes obliterate makes at most: the first removes the queue, the next
confirm that nothing wrote to it meanwhile (a forced settle's stalled sweep, a lease)."""


def drain(conn: Connection, queue: str, *, scheduled: bool = True) -> int:
    """Remove every pending job of ``queue`` (the pending set and every group's lane; an
    emptied lane leaves the ring) and, with ``scheduled``, every scheduled job (a retry
    waiting for its backoff is a scheduled job): their rows and their set entries.

    Active jobs are untouched and settle as usual; completed and dead jobs stay. Returns
    how many jobs were removed. Batched (:func:`drain_batches`): a job added while the drain
    runs may be removed or kept.

    A removed flow child counts on its parent as failed (``last_error`` names it,
    "drained"), as ``remove_job`` does: a parent is never left
    waiting for children that are gone. A parent on another queue hears through this
    queue's outbox, delivered here when the last batch is done (a worker's beat would
    too, but a drained queue may have none).
    """
    return sum(drain_batches(conn, queue, scheduled=scheduled))


def drain_batches(conn: Connection, queue: str, *, scheduled: bool = True,
                  batch: int = BULK_BATCH) -> Iterator[int]:
    """:func:`drain`, one Lua call per step: yields how many jobs each call removed (never
    more than ``batch``, at most :data:`BULK_BATCH`). After the last, the outbox of the
    drained flow children's outcomes is delivered (one read when it is empty)."""
    keys = conn.keys(queue)
    if batch > BULK_BATCH:
        raise InvalidArgument(f"batch must be at most {BULK_BATCH}, got {batch}")
    position = removals.DRAIN_START
    while position != removals.DRAIN_DONE:
        removed, position = removals.drained(
            conn.executor.run(*removals.drain_call(keys, position, scheduled, batch)))
        yield removed
    deliver_outbox(conn, queue)  # the drained children's outcomes owed to other queues


def obliterate(conn: Connection, queue: str, *, force: bool = False) -> int:
    """Remove every key of ``queue``: rows in every state, the state sets, lanes, ring,
    group counters and limits, metrics, the outcome stream, the archive lease, any key a
    crash left behind under the queue's base, and last its meta hash; then take it out of
    the declared set. Returns how many keys were removed.

    Refuses, changing nothing, with :class:`~echomq.errors.QueueBusy` while jobs are
    active, and with :class:`~echomq.errors.HistoryNotArchived` while its declared outcome
    stream holds entries the archive has not folded and trimmed; ``force`` skips both
    (a forced worker's settle then finds no job).

    While it runs the queue is paused (claim hands out nothing) and marked: an ``add``
    or a ``resume`` raises ``QueueBusy`` rather than land in (or hand out skeleton rows
    of) a queue being taken apart. Once it returns
    the name is free, and an add starts a new, empty queue. Interrupted, the queue stays
    paused and marked: obliterate again to finish.

    A job whose parent waits on another queue is counted there as failed ("obliterated"),
    as a drain counts one: the outcomes go to this queue's outbox, delivered before its
    last keys go. A parent on this queue goes with it; its children on other queues run
    on, and their outcomes find no parent (a no-op).
    """
    return sum(obliterate_batches(conn, queue, force=force))


def obliterate_batches(conn: Connection, queue: str, *, force: bool = False
                       ) -> Iterator[int]:
    """:func:`obliterate`, one Lua call per step: yields how many keys each call removed
    (never more than :data:`BULK_BATCH`). The first step checks and marks the queue (it
    yields 0); nothing is removed when it refuses. The outbox is delivered after the
    SCAN passes, before the last step."""
    keys = conn.keys(queue)
    removals.obliterate_begun(
        conn.executor.run(*removals.obliterate_begin_call(keys, force)), queue)
    yield 0
    for _ in range(SCAN_PASSES):
        found = 0
        for batch in _key_batches(conn, keys):
            removed = removals.obliterated_keys(
                conn.executor.run(*removals.obliterate_keys_call(keys, batch)), queue)
            found += len(batch)
            yield removed
        if found == 0:
            break
    else:
        raise QueueBusy(f"obliterate {queue!r}: keys kept appearing under it through "
                        f"{SCAN_PASSES} passes; stop what writes to it, then obliterate "
                        "again (it stays paused and marked)")
    # what the destroyed jobs' parents elsewhere are owed; delivered, the outbox is gone
    delivered = deliver_outbox(conn, queue)
    yield removals.obliterate_ended(
        conn.executor.run(*removals.obliterate_end_call(keys)), queue) + (delivered > 0)
    # another slot: the declared set is one key per prefix, never touched by queue Lua
    conn.redis.srem(conn.declared_set, queue)


def _key_batches(conn: Connection, keys: Keys) -> Iterator[list[str]]:
    """One SCAN pass over the queue's keys but its meta hash and its outbox (the last
    step's), in batches of at most :data:`BULK_BATCH`."""
    batch: list[str] = []
    kept = (keys.meta, keys.flow_outbox)
    for key in scan_slot(conn.redis, keys.pattern, BULK_BATCH, keys.meta):
        if key in kept:
            continue
        batch.append(str(key))
        if len(batch) == BULK_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def unarchived_entries(conn: Connection, queue: str) -> int:
    """How many outcome entries ``obliterate`` would lose: the declared stream's length
    (the archive trims what it folded), 0 when the stream is not declared."""
    keys = conn.keys(queue)
    if conn.redis.hget(keys.meta, "stream") != "1":
        return 0
    return int(conn.redis.xlen(keys.completions))
