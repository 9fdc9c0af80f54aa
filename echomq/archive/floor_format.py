"""The floor's on-disk format version, and the migration of older floors to it.

Format 1 kept three indexes per entry: by job, ``by_outcome`` (queue, outcome, settle
time, id) and ``by_time`` (queue, settle time, id). Format 2 keeps the job index and one
time index per outcome (``by_completed``, ``by_cancelled``, ``by_dead``: queue, settle
time, id): one LMDB put fewer per entry, and keys that arrive in time order, so LMDB's
append mode fills their pages (a time query across outcomes merges the three).

Opening a format-1 floor migrates it: ``by_outcome`` is copied into the per-outcome
indexes in bounded transactions (idempotent: a crash mid-way starts over), then the old
indexes are dropped and the version recorded in one last transaction. A floor written by a
newer version is refused with the way out: rebuild it from the bucket with restore.

The floor's identity, its other record of its own, is kept beside the format.
"""

from __future__ import annotations

import logging
import uuid
from functools import partial
from typing import Any, cast

from echomq.archive.lmdbstore import Dbs, LmdbStore, Txn
from echomq.errors import FloorError

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
FORMAT_KEY = b"\x00floor-format"
"""In the ``queues`` database: no queue name holds a NUL, so no queue record collides."""
IDENTITY_KEY = b"\x00floor-id"
"""In the ``queues`` database too (made once, kept: how an archive of record names it)."""
RETIRED_DBS = (b"by_outcome", b"by_time")
"""Sub-databases of format 1, dropped by the migration."""
BATCH = 50_000
"""Keys copied per migration transaction (bounded: LMDB caps a transaction's dirty pages)."""


def version(txn: Txn, dbs: Dbs) -> int:
    """The format the floor is written in (recorded on open; none recorded: format 1)."""
    raw = txn.get(FORMAT_KEY, db=dbs["queues"])
    return 1 if raw is None else int(bytes(cast(bytes, raw)))


def ensure(store: LmdbStore) -> None:
    """Record the format of a new floor, migrate an older one, refuse a newer one."""
    with store.read() as (txn, dbs):
        raw = txn.get(FORMAT_KEY, db=dbs["queues"])
        old = txn.get(RETIRED_DBS[0]) is not None  # a named database: a main-db key
    found = None if raw is None else int(bytes(cast(bytes, raw)))
    if found == FORMAT_VERSION:
        return
    if found is not None and found > FORMAT_VERSION:
        raise FloorError(
            f"the floor at {store.path} is in format {found}, newer than this version "
            f"reads ({FORMAT_VERSION}): upgrade echomq, or rebuild a floor from the bucket "
            "with `emq archive restore` (archive.restore) into a new path")
    if old:
        log.warning("the floor at %s is in format 1: migrating it to format %d",
                    store.path, FORMAT_VERSION)
        after: bytes | None = b""
        while after is not None:
            after = store.write(partial(_copy, store=store, start=after))
    store.write(partial(_finish, store=store))


def _copy(txn: Txn, dbs: Dbs, *, store: LmdbStore, start: bytes) -> bytes | None:
    """Copy up to ``BATCH`` ``by_outcome`` keys from ``start`` on into the per-outcome
    indexes; the key to resume after (None: all copied)."""
    source = store.env.open_db(RETIRED_DBS[0], txn=txn, create=False)
    cur = txn.cursor(db=source)
    if not cur.set_range(start):
        return None
    if start and cast(bytes, cur.key()) == start and not cur.next():
        return None
    targets: dict[bytes, Any] = {}
    for copied, key in enumerate(cur.iternext(values=False), 1):
        queue, _, rest = cast(bytes, key).partition(b"\x00")
        outcome, _, at_id = rest.partition(b"\x00")
        db = targets.get(outcome)
        if db is None:
            db = targets[outcome] = dbs[f"by_{outcome.decode()}"]
        txn.put(queue + b"\x00" + at_id, b"", db=db)
        if copied >= BATCH:
            return cast(bytes, key)
    return None


def _finish(txn: Txn, dbs: Dbs, *, store: LmdbStore) -> None:
    if txn.get(FORMAT_KEY, db=dbs["queues"]) is not None:
        return  # another instance finished first
    for name in RETIRED_DBS:
        if txn.get(name) is not None:
            txn.drop(store.env.open_db(name, txn=txn, create=False), delete=True)
    txn.put(FORMAT_KEY, str(FORMAT_VERSION).encode(), db=dbs["queues"])


def identity(store: LmdbStore) -> str:
    """The floor's own id, made the first time it is asked for."""
    with store.read() as (txn, dbs):
        raw = txn.get(IDENTITY_KEY, db=dbs["queues"])
    if raw is not None:
        return bytes(raw).decode()
    return store.write(_make_identity)


def _make_identity(txn: Txn, dbs: Dbs) -> str:
    txn.put(IDENTITY_KEY, uuid.uuid4().hex.encode(), db=dbs["queues"], overwrite=False)
    return bytes(cast(bytes, txn.get(IDENTITY_KEY, db=dbs["queues"]))).decode()
