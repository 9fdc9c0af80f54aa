"""The floor's per-queue state record, the base every part of the floor reads and writes.

Each queue has one JSON record in the ``queues`` sub-database (checkpoint, counts, gaps);
a write transaction reads it with ``_state`` and stores it back with ``_save``.
"""

from __future__ import annotations

import json
from typing import Any, cast

from echomq.archive.lmdbstore import Dbs, LmdbStore, Txn
from echomq.archive.stream_ids import ZERO_ID
from echomq.queue.keys import check_name


def _qk(queue: str) -> bytes:
    return check_name(queue, "queue name").encode() + b"\x00"


class FloorState(LmdbStore):
    """An LMDB store with the floor's per-queue state record (see :class:`Floor`)."""

    @staticmethod
    def _state(txn: Txn, dbs: Dbs, queue: str) -> dict[str, Any]:
        raw = txn.get(queue.encode(), db=dbs["queues"])
        if raw is None:
            return {"checkpoint": ZERO_ID, "entries": 0, "quarantined": 0, "slices": 0,
                    "pending": 0, "trimmed_through": ZERO_ID, "accounted": 0}
        state: dict[str, Any] = json.loads(cast(bytes, raw))
        if "accounted" not in state:  # a floor from before the count: known only when empty
            state["accounted"] = 0 if state["checkpoint"] == ZERO_ID else None
        return state

    @staticmethod
    def _save(txn: Txn, dbs: Dbs, queue: str, state: dict[str, Any]
              ) -> None:
        txn.put(queue.encode(), json.dumps(state).encode(), db=dbs["queues"])
