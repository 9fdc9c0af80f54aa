"""Compaction: merge a queue's many small slice objects into packs of about a target size.

A fold every 30 s on a quiet queue leaves thousands of tiny objects; restore then pays
one request per object. A compaction never leaves the bucket in a state a restore would
fail on, in this order: read and verify the objects of each run (their digests against
the manifest, each chained to the one before), write the pack (create-only, confirmed
stored), switch the manifest to the packs (one conditional write on its ETag, head
unchanged), and only then delete the objects it replaced. Before the switch the packs are
orphans restore skips; after it the old objects are; both are deleted by the next
compaction (or prune) when a crash left them.

The chain itself is untouched: the manifest keeps every slice's digest, and a pack is
verified by splitting it back into those slices (:mod:`echomq.archive.packs`), so the
floor's uploaded digests and kept ``head_digest`` pins stay valid, and tampering with a
pack is named by ``verify``. The newest object is never merged (a fold may still be
confirming it). The fold lease keeps folds and prunes out while it runs: renewed as each
object is read, and by a thread renewing it while one call lists or deletes a page at a time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import islice

from echomq.archive.fold_lease import FoldLease
from echomq.archive.manifest import Link, Manifest, Pack
from echomq.archive.packs import build_pack, split_pack
from echomq.archive.remote import Remote
from echomq.archive.report import ArchiveReport
from echomq.archive.slices import GENESIS, SliceContent, SliceRef
from echomq.archive.stream_ids import id_lt, parse_stream_id
from echomq.errors import ChainBroken
from echomq.queue.connection import Connection
from echomq.queue.validate import positive_int

COMPACT_CRASH_POINTS = ("after_pack_put", "before_manifest", "after_manifest",
                        "during_delete", "after_delete")
"""Where ``hook(name)`` is called; tests kill a compaction at each to prove the bucket
restores exactly and a rerun completes it."""
DEFAULT_TARGET_BYTES = 8 * 1024 * 1024
FETCHERS = 8

Obj = tuple[SliceRef, tuple[Link, ...], str | None]


@dataclass(slots=True)
class CompactReport(ArchiveReport):
    """What one compaction did: ``objects_before``/``objects_after`` on the chain,
    ``packs`` written, ``deleted`` objects (replaced ones and leftovers of a crash)."""

    objects_before: int = 0
    objects_after: int = 0
    packs: int = 0
    deleted: int = 0


def compact(conn: Connection, remote: Remote, queue: str, *,
            target_bytes: int = DEFAULT_TARGET_BYTES, lease_ms: int = 30_000,
            wait_ms: int = 0, level: int = 6,
            hook: Callable[[str], None] | None = None) -> CompactReport:
    """Merge runs of consecutive small objects of ``queue``'s chain into packs of up to
    ``target_bytes`` (compressed) each.

    Takes the fold lease (``LeaseHeld`` when a fold or a prune holds it and ``wait_ms``
    runs out). Refuses to merge a chain that does not verify (``ChainBroken``), and stops
    with ``ManifestConflict`` when the manifest moved under it (nothing is deleted then).
    """
    target_bytes = positive_int(target_bytes, "target_bytes")
    report = CompactReport(queue)
    at = hook or (lambda _: None)
    lease = FoldLease(conn, queue, lease_ms, wait_ms).acquire()
    try:
        manifest = remote.read_manifest(queue)
        if manifest is None:
            return report
        objects = manifest.objects()
        report.objects_before = report.objects_after = len(objects)
        with lease.kept():  # two listings of every object: a page at a time
            report.deleted += _delete_stale(remote, manifest, objects, lease.renew)
            sizes = remote.slice_sizes(queue)
        runs = _runs(objects, sizes, target_bytes)
        if not runs:
            return report
        packs: list[tuple[Pack, list[Obj]]] = []
        for run in runs:
            lease.renew()
            pack = build_pack(_verified(remote, manifest, run, lease.renew), level)
            remote.put_slice(pack)
            remote.confirm_slice(pack.meta)
            packs.append((Pack(pack.meta.first, pack.meta.last, pack.meta.digest), run))
            report.slices += sum(len(o[1]) for o in run)
            report.entries += pack.meta.count
            at("after_pack_put")
        lease.renew()
        at("before_manifest")
        written = remote.rewrite_manifest(_with_packs(manifest, [p for p, _ in packs]),
                                          manifest)
        remote.confirm_manifest(written)
        at("after_manifest")
        report.packs = len(packs)
        report.objects_after = len(written.objects())
        for _, run in packs:
            lease.renew()
            with lease.kept():  # a run of thousands of objects: a batch at a time
                remote.delete_slices([ref for ref, _, _ in run])
            report.deleted += len(run)
            at("during_delete")
        at("after_delete")
    finally:
        lease.release()
    return report


def _delete_stale(remote: Remote, manifest: Manifest, objects: list[Obj],
                  renew: Callable[[], None]) -> int:
    """Delete objects at or below the head that the chain does not use: what an
    interrupted compaction (or prune) left. Nothing after the head is touched (a fold's
    next slice may be there, waiting for its manifest)."""
    used = {o[0] for o in objects}
    stale = [r for r in remote.list_slices(manifest.queue)
             if r not in used and not id_lt(manifest.head, r.last)]
    if stale:
        renew()
        remote.delete_slices(stale)
    return len(stale)


def _runs(objects: list[Obj], sizes: dict[str, int], target: int) -> list[list[Obj]]:
    """Consecutive objects (never the newest) grouped up to ``target`` bytes; only runs of
    two or more are worth a pack."""
    runs: list[list[Obj]] = []
    run: list[Obj] = []
    total = 0
    for obj in objects[:-1]:
        size = sizes.get(obj[0].name, target)
        if run and total + size > target:
            runs.append(run)
            run, total = [], 0
        run.append(obj)
        total += size
    runs.append(run)
    return [r for r in runs if len(r) > 1]


def _verified(remote: Remote, manifest: Manifest, run: list[Obj],
              renew: Callable[[], None]) -> list[SliceContent]:
    """The slices of ``run``, each checked against the manifest's digest and chained to
    the one before (a pack split back into its slices first). The lease is renewed as
    each object is read: a run of thousands of tiny objects outlasts one lease."""
    digests = {link[1]: link[2] for link in manifest.chain}
    digests[manifest.base.through] = manifest.base.digest or GENESIS
    out: list[SliceContent] = []
    for (ref, links, pack), content in _fetched(remote, run, renew):
        where = remote.address(ref.name)
        if pack is not None and content.meta.digest != pack:
            raise ChainBroken(f"{where}: the pack's digest is {content.meta.digest}, the "
                              f"manifest recorded {pack}: refusing to compact (run verify)")
        parts = [content] if pack is None else split_pack(content, links, where)
        for part, link in zip(parts, links, strict=True):
            meta = part.meta
            if meta.digest != link[2] or meta.prev_digest != digests.get(meta.prev):
                raise ChainBroken(f"{where}: slice {meta.first}..{meta.last} is not the one "
                                  "the manifest recorded: refusing to compact (run verify)")
        out.extend(parts)
    return out


def _fetched(remote: Remote, run: list[Obj], renew: Callable[[], None]
             ) -> Iterator[tuple[Obj, SliceContent]]:
    """Each object of ``run`` with its content, in order, ``FETCHERS`` reads ahead (the
    store's latency, not the merge, is what a run of tiny objects costs)."""
    with ThreadPoolExecutor(max_workers=FETCHERS, thread_name_prefix="emq-compact") as pool:
        ahead: deque[tuple[Obj, Future[SliceContent]]] = deque()
        todo = iter(run)
        for obj in islice(todo, FETCHERS):
            ahead.append((obj, pool.submit(remote.get_slice, obj[0])))
        while ahead:
            obj, future = ahead.popleft()
            nxt = next(todo, None)
            if nxt is not None:
                ahead.append((nxt, pool.submit(remote.get_slice, nxt[0])))
            renew()
            yield obj, future.result()


def _with_packs(manifest: Manifest, new: list[Pack]) -> Manifest:
    """The manifest with ``new`` packs replacing the objects they cover."""
    def covered(old: Pack) -> bool:
        return any(not id_lt(old.first, n.first) and not id_lt(n.last, old.last) for n in new)

    packs = [p for p in manifest.packs if not covered(p)] + new
    packs.sort(key=lambda p: parse_stream_id(p.first))
    return replace(manifest, packs=tuple(packs))
