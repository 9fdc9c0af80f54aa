"""The floor's on-disk format version, and the migration of older floors to it.

Format 1 kept four indexes per entry; format 2 drops ``by_time`` (a time query merges the
per-outcome indexes, which hold the same keys), one LMDB put and ~50 bytes fewer per
entry. Opening a format-1 floor migrates it in one write transaction: ``by_time`` is
dropped (everything it held is in ``by_outcome``) and the version is recorded. A floor
written by a newer version is refused with the way out: rebuild it from the bucket.
"""

from __future__ import annotations

from typing import cast

from echomq.archive.floor_state import FloorState
from echomq.archive.lmdbstore import Dbs, Txn
from echomq.errors import FloorError

FORMAT_VERSION = 2
FORMAT_KEY = b"\x00floor-format"
"""In the ``queues`` database: no queue name holds a NUL, so no queue record collides."""
RETIRED_DBS = (b"by_time",)
"""Sub-databases of older formats, dropped by the migration."""


class FloorFormat(FloorState):
    """A floor store that knows its format (mixed into :class:`~echomq.archive.floor.Floor`)."""

    def format_version(self) -> int:
        """The format this floor is written in (recorded on open)."""
        with self._read() as (txn, dbs):
            raw = txn.get(FORMAT_KEY, db=dbs["queues"])
        return 1 if raw is None else int(bytes(cast(bytes, raw)))

    def _ensure_format(self) -> None:
        """Record the format of a new floor, migrate an older one, refuse a newer one."""
        with self._read() as (txn, dbs):
            raw = txn.get(FORMAT_KEY, db=dbs["queues"])
        found = None if raw is None else int(bytes(cast(bytes, raw)))
        if found == FORMAT_VERSION:
            return
        if found is not None and found > FORMAT_VERSION:
            raise FloorError(
                f"the floor at {self.path} is in format {found}, newer than this version "
                f"reads ({FORMAT_VERSION}): upgrade echomq, or rebuild a floor from the bucket "
                "with `emq archive restore` (archive.restore) into a new path")

        def migrate(txn: Txn, dbs: Dbs) -> None:
            if txn.get(FORMAT_KEY, db=dbs["queues"]) is not None:
                return  # another instance migrated it first
            for name in RETIRED_DBS:
                if txn.get(name) is not None:  # a named database is a key of the main one
                    txn.drop(self.env.open_db(name, txn=txn, create=False), delete=True)
            txn.put(FORMAT_KEY, str(FORMAT_VERSION).encode(), db=dbs["queues"])

        self._write(migrate)
