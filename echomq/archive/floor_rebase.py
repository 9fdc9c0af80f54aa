"""Handing a queue over between drivers: forget this floor's slices another driver made.

A driver that committed slices to its floor but lost the queue before uploading them (it
was killed, stalled past its lease, or its upload raced another driver's) finds, when it
folds the queue again, that another driver's slices cover the same stream entries with
other boundaries. The remote's chain is the history of record, so this floor drops its
unuploaded slices and rolls its checkpoint back to where its uploaded history ends; the
driver then pulls the remote's slices over that range. The entries themselves stay: they
are the same stream entries, so the pulled slices find them present and count none twice.
"""

from __future__ import annotations

import json
from typing import cast

from echomq.archive.floor_state import load, queue_key, save
from echomq.archive.lmdbstore import Dbs, Txn, scan
from echomq.archive.slices import SliceMeta


def drop_pending(txn: Txn, dbs: Dbs, queue: str) -> int:
    """Forget every slice of ``queue`` not yet uploaded and move the checkpoint back to
    the start of the first; returns how many went."""
    keys = [key for key, _ in scan(txn, dbs["pending"], queue_key(queue))]
    if not keys:
        return 0
    metas = [SliceMeta.from_json(json.loads(cast(bytes, txn.get(k, db=dbs["slices"]))))
             for k in keys]
    for key in keys:
        txn.delete(key, db=dbs["pending"])
        txn.delete(key, db=dbs["slices"])
    state = load(txn, dbs, queue)
    state["pending"] -= len(keys)
    state["slices"] -= len(keys)
    if state["accounted"] is not None:  # the pulled slices count these again
        state["accounted"] -= sum(m.count for m in metas)
    state["checkpoint"] = metas[0].prev
    save(txn, dbs, queue, state)
    return len(keys)
