"""The floor's chain of digests: what this floor uploaded, to check the bucket against.

Each slice record keeps its checksums and chain digests once uploaded; the next slice
chains from the newest, and a rebuilt slice from the one before it. When a prune has
forgotten every slice of a queue, the base it left (in the queue's state) is the link.
"""

from __future__ import annotations

import json
from typing import cast

from echomq.archive.floor_state import load, queue_key
from echomq.archive.lmdbstore import Dbs, Txn, scan
from echomq.archive.slices import SliceMeta
from echomq.archive.stream_ids import ZERO_ID, id_key


def update_record(txn: Txn, dbs: Dbs, meta: SliceMeta, *, digests: bool = False,
                  uploaded: bool = False) -> None:
    """Update the slice's record: its checksums and chain digests, and/or its
    ``uploaded`` flag (absent record: nothing to update)."""
    key = queue_key(meta.queue) + id_key(meta.first)
    raw = txn.get(key, db=dbs["slices"])
    if raw is None:
        return
    record = json.loads(cast(bytes, raw))
    if digests:
        record.update(sha256=meta.sha256, size=meta.size, digest=meta.digest,
                      prev_digest=meta.prev_digest)
    if uploaded:
        record["uploaded"] = True
    txn.put(key, json.dumps(record).encode(), db=dbs["slices"])


def uploaded_slices(txn: Txn, dbs: Dbs, queue: str) -> list[SliceMeta]:
    """The slices uploaded or restored, with their digests, in order."""
    records = [json.loads(value) for _, value in scan(txn, dbs["slices"], queue_key(queue))]
    return [SliceMeta.from_json(r) for r in records if r.get("uploaded") and r.get("digest")]


def last_digest(txn: Txn, dbs: Dbs, queue: str) -> str:
    """The digest the queue's next slice chains from (``""``, the genesis, before the
    first)."""
    qk = queue_key(queue)
    cur = txn.cursor(db=dbs["slices"])
    found = cur.set_range(qk[:-1] + b"\x01")  # the first key after this queue's
    found = cur.prev() if found else cur.last()
    key = cast(bytes, cur.key()) if found else b""
    if not key.startswith(qk):  # none left: a prune's base, else the genesis
        return str((load(txn, dbs, queue).get("base") or {}).get("digest", ""))
    return str(json.loads(cast(bytes, cur.value())).get("digest", ""))


def digest_before(txn: Txn, dbs: Dbs, meta: SliceMeta) -> str:
    """The digest of the slice that ends at ``meta.prev`` (``""`` if unknown)."""
    if meta.prev == ZERO_ID:
        return ""  # the genesis: the first slice follows nothing
    qk = queue_key(meta.queue)
    cur = txn.cursor(db=dbs["slices"])
    found = cur.set_range(qk + id_key(meta.first))
    found = cur.prev() if found else cur.last()
    if not found or not cast(bytes, cur.key()).startswith(qk):
        base = load(txn, dbs, meta.queue).get("base") or {}
        return str(base.get("digest", "")) if base.get("through") == meta.prev else ""
    record = json.loads(cast(bytes, cur.value()))
    return str(record.get("digest", "")) if record.get("last") == meta.prev else ""
