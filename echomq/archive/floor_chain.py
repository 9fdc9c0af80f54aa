"""The floor's chain of digests: what this floor uploaded, to check the bucket against.

Each slice record keeps its checksums and chain digests once uploaded; the next slice
chains from the newest, and a rebuilt slice from the one before it.
"""

from __future__ import annotations

import json
from typing import cast

from echomq.archive.floor_state import FloorState, _qk
from echomq.archive.lmdbstore import Dbs, Txn
from echomq.archive.slices import SliceMeta
from echomq.archive.stream_ids import ZERO_ID, id_key


class DigestChain(FloorState):
    """The uploaded-digest bookkeeping of a floor (mixed into :class:`Floor`)."""

    def keep_digest(self, meta: SliceMeta) -> None:
        """Record the checksums and chain digests of the slice as it was uploaded (a slice
        folded without a remote has none until then)."""
        self._write(lambda txn, dbs: self._update_record(txn, dbs, meta, digests=True))

    @staticmethod
    def _update_record(txn: Txn, dbs: Dbs, meta: SliceMeta, *, digests: bool = False,
                       uploaded: bool = False) -> None:
        """Update the slice's record in ``txn``: its checksums and chain digests, and/or
        its ``uploaded`` flag (absent record: nothing to update)."""
        key = _qk(meta.queue) + id_key(meta.first)
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

    def uploaded_slices(self, queue: str) -> list[SliceMeta]:
        """The slices this floor uploaded or restored, with their digests, in order."""
        with self._read() as (txn, dbs):
            records = [json.loads(value) for _, value in
                       self._scan(txn, dbs["slices"], _qk(queue))]
        return [SliceMeta.from_json(r) for r in records if r.get("uploaded") and r.get("digest")]

    def last_digest(self, queue: str) -> str:
        """The digest the queue's next slice chains from (``""``, the genesis, before the
        first)."""
        qk = _qk(queue)
        with self._read() as (txn, dbs):
            cur = txn.cursor(db=dbs["slices"])
            found = cur.set_range(qk[:-1] + b"\x01")  # the first key after this queue's
            found = cur.prev() if found else cur.last()
            key = cast(bytes, cur.key()) if found else b""
            if not key.startswith(qk):  # none left: a prune's base, else the genesis
                return str((self._state(txn, dbs, queue).get("base") or {}).get("digest", ""))
            return str(json.loads(cast(bytes, cur.value())).get("digest", ""))

    def digest_before(self, meta: SliceMeta) -> str:
        """The digest of the slice that ends at ``meta.prev`` (``""`` if unknown)."""
        if meta.prev == ZERO_ID:
            return ""  # the genesis: the first slice follows nothing
        qk = _qk(meta.queue)
        with self._read() as (txn, dbs):
            cur = txn.cursor(db=dbs["slices"])
            found = cur.set_range(qk + id_key(meta.first))
            found = cur.prev() if found else cur.last()
            if not found or not cast(bytes, cur.key()).startswith(qk):
                base = self._state(txn, dbs, meta.queue).get("base") or {}
                return str(base.get("digest", "")) if base.get("through") == meta.prev else ""
            record = json.loads(cast(bytes, cur.value()))
        return str(record.get("digest", "")) if record.get("last") == meta.prev else ""
