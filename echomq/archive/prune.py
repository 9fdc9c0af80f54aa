"""Retention of the archive: a queue's floor and bucket forget outcomes older than its policy.

The policy is a duration per queue, kept in the queue's meta hash (``archive_keep``, in
ms) so every driver and scheduler sharing the queue reads the same one; ``prune`` applies
it (or a ``keep`` given to it, which wins). Slices are dropped whole: a slice goes once
its newest outcome (its last stream id, the time Redis recorded it) is older than the
cutoff, and only a run from the oldest on, so the chain that is left starts at one point.

The order makes every crash safe to rerun, and the fold lease keeps folds and compactions
out meanwhile: the bucket's manifest is switched first (conditional write) to start after
the dropped slices, recording what was dropped (range, counts, the digest of the last
dropped slice, which fixes them all, when, by which policy), then the dropped objects are
deleted, then the floor forgets the same slices. A floor that uploads to a remote is
pruned with it, so both forget exactly the same slices.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from echomq.archive.floor import Floor
from echomq.archive.fold_lease import FoldLease
from echomq.archive.manifest import Base, Manifest, Pruned, without_packs_before
from echomq.archive.remote import Remote
from echomq.archive.report import ArchiveReport
from echomq.archive.stream_ids import ZERO_ID, id_lt, parse_stream_id
from echomq.errors import ArchiveError, InvalidArgument
from echomq.queue.connection import Connection
from echomq.queue.declared import declared_queues
from echomq.queue.validate import positive_int

log = logging.getLogger(__name__)
KEEP_FIELD = "archive_keep"
"""The queue's meta hash field holding its archive retention, in ms."""
PRUNE_CRASH_POINTS = ("after_manifest", "after_delete")
"""Where ``hook(name)`` is called; tests kill a prune at each to prove a rerun completes."""


@dataclass(slots=True)
class PruneReport(ArchiveReport):
    """What one prune did: ``slices``/``entries`` dropped from the bucket's chain (or the
    floor's, without a remote), ``deleted`` objects, and what the floor forgot."""

    cutoff: int = 0
    through: str = ZERO_ID
    policy: str = ""
    deleted: int = 0
    floor_slices: int = 0
    floor_entries: int = 0
    floor_quarantined: int = 0
    error: str | None = None


def set_keep(conn: Connection, queue: str, keep_ms: int | None) -> None:
    """Keep ``queue``'s archived outcomes ``keep_ms`` milliseconds (None: forever, the
    default). Stored with the queue, so every prune of it (``emq archive prune``, the
    scheduler) applies the same policy."""
    meta = conn.keys(queue).meta
    if keep_ms is None:
        conn.redis.hdel(meta, KEEP_FIELD)
        return
    conn.redis.hset(meta, KEEP_FIELD, str(positive_int(keep_ms, "keep")))


def keep_of(conn: Connection, queue: str) -> int | None:
    """``queue``'s archive retention in ms (None: kept forever)."""
    value = conn.redis.hget(conn.keys(queue).meta, KEEP_FIELD)
    return None if value is None else int(value)


def policy_text(keep_ms: int) -> str:
    """``keep=400d`` (the largest unit up to days that divides it)."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if keep_ms % size == 0:
            return f"keep={keep_ms // size}{unit}"
    return f"keep={keep_ms}ms"


def prune(conn: Connection, queue: str, *, floor: Floor | str | os.PathLike[str] | None = None,
          remote: Remote | None = None, keep: int | None = None, now_ms: int | None = None,
          lease_ms: int = 30_000, wait_ms: int = 0,
          hook: Callable[[str], None] | None = None) -> PruneReport:
    """Forget ``queue``'s slices whose newest outcome is older than ``keep`` ms (default:
    the queue's policy, :func:`set_keep`) in ``remote`` and ``floor``.

    Refuses (``InvalidArgument``) a queue with no policy and no ``keep``, a call with
    neither a floor nor a remote, and a floor that uploads to a remote when the remote is
    not given (they would forget different slices). Takes the fold lease
    (``LeaseHeld`` when a fold or a compaction holds it and ``wait_ms`` runs out).
    """
    keep = keep if keep is not None else keep_of(conn, queue)
    if keep is None:
        raise InvalidArgument(f"{queue!r} has no archive retention policy: set one "
                              "(archive.set_keep, emq archive prune --keep 400d --save) or "
                              "pass keep")
    keep = positive_int(keep, "keep")
    if floor is None and remote is None:
        raise InvalidArgument("prune needs a floor, a remote, or both")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = PruneReport(queue, cutoff=now - keep, policy=policy_text(keep))
    opened = floor if isinstance(floor, Floor) or floor is None else Floor(floor)
    try:
        if opened is not None and remote is None and opened.uploaded_slices(queue):
            raise InvalidArgument(f"the floor at {opened.path} uploads {queue!r} to a remote: "
                                  "prune it with that remote, so both forget the same slices")
        lease = FoldLease(conn, queue, lease_ms, wait_ms).acquire()
        try:
            _prune(queue, opened, remote, report, lease, hook or (lambda _: None))
        finally:
            lease.release()
    finally:
        if opened is not None and opened is not floor:
            opened.close()
    return report


def prune_declared(conn: Connection, floor: Floor | str | os.PathLike[str] | None = None,
                   remote: Remote | None = None, *, wait_ms: int = 5_000
                   ) -> dict[str, PruneReport]:
    """Prune every declared queue that has a policy (the scheduler's job, beside the
    fold). A queue that fails is reported with ``error`` set (and logged) and the others
    are still pruned."""
    reports: dict[str, PruneReport] = {}
    for queue in declared_queues(conn):
        if keep_of(conn, queue) is None:
            continue
        try:
            reports[queue] = prune(conn, queue, floor=floor, remote=remote, wait_ms=wait_ms)
        except ArchiveError as exc:
            log.warning("archive prune of %r failed: %s", queue, exc)
            reports[queue] = PruneReport(queue, error=repr(exc))
    return reports


def _older(last: str, cutoff: int) -> bool:
    return parse_stream_id(last)[0] < cutoff


def _prune(queue: str, floor: Floor | None, remote: Remote | None, report: PruneReport,
           lease: FoldLease, at: Callable[[str], None]) -> None:
    if remote is not None:
        manifest = remote.read_manifest(queue)
        base = manifest.base if manifest is not None else Base()
        if manifest is not None:
            base = _prune_manifest(remote, manifest, report, lease.renew).base
            at("after_manifest")
        lease.renew()
        with lease.kept():  # a listing and deletes of every dropped object: page by page
            # the dropped objects, and any a crash left
            gone = [r for r in remote.list_slices(queue) if not id_lt(base.through, r.last)]
            if gone:
                remote.delete_slices(gone)
                report.deleted += len(gone)
        at("after_delete")
        through, digest = base.through, base.digest
    elif floor is not None:
        metas = floor.slices(queue)
        old = metas[:next((i for i, m in enumerate(metas) if not _older(m.last, report.cutoff)),
                          len(metas))]
        through = old[-1].last if old else ZERO_ID
        digest = old[-1].digest if old else ""
        report.slices, report.entries = len(old), sum(m.count for m in old)
        report.through = through
    if floor is not None and id_lt(floor.base(queue)[0], through):
        lease.renew()
        report.floor_slices, report.floor_entries, report.floor_quarantined = (
            floor.drop_through(queue, through, digest=digest))


def _prune_manifest(remote: Remote, manifest: Manifest, report: PruneReport,
                    renew: Callable[[], None]) -> Manifest:
    """Switch the manifest to start after the objects wholly older than the cutoff."""
    objects = manifest.objects()
    gone = 0
    while gone < len(objects) and _older(objects[gone][0].last, report.cutoff):
        gone += 1
    report.through = manifest.base.through
    if not gone:
        return manifest
    dropped = [link for _, links, _ in objects[:gone] for link in links]
    entries = 0
    for ref, _, _ in objects[:gone]:
        renew()
        entries += remote.slice_count(ref)
    through, digest = dropped[-1][1], dropped[-1][2]
    kept = manifest.chain[len(dropped):]
    record = Pruned(dropped[0][0], through, len(dropped), entries, digest,
                    int(time.time() * 1000), report.policy)
    new = replace(manifest, slices=len(kept), entries=manifest.entries - entries, chain=kept,
                  base=Base(through, digest, manifest.base.slices + len(dropped),
                            manifest.base.entries + entries),
                  pruned=manifest.pruned + (record,),
                  packs=without_packs_before(manifest.packs, through))
    written = remote.rewrite_manifest(new, manifest)
    remote.confirm_manifest(written)
    report.slices, report.entries, report.through = len(dropped), entries, through
    return written
