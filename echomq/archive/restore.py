"""Restore and verify: rebuild a floor from the remote alone, proving nothing is missing.

The chain is planned before anything is read: the manifest lists every slice (ids and
digest) up to its head, and each must be there (:class:`~echomq.errors.MissingSlice`
names the first that is not). A bucket with slices but no manifest is refused
(:class:`ManifestMissing`) unless the operator asks to rebuild from the chain of names
alone. Each object is then read and checked (stored sha256, gzip, header, order), its
digest compared with the manifest's, its ``prev_digest`` with the slice before it, and,
where a floor exists, with the digests that floor uploaded (:class:`ChainBroken` names
the slice), then committed to the floor; commits are idempotent, so an interrupted
restore simply resumes. A slice that is not on the manifest's chain (a driver that lost
its lease, a crash before the manifest moved) is reported as an orphan and skipped.
"""

from __future__ import annotations

import os
from collections import defaultdict, deque
from collections.abc import Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from typing import TYPE_CHECKING

from echomq.archive.entries import to_ms
from echomq.archive.floor import Floor
from echomq.archive.manifest import Base, Link, Manifest
from echomq.archive.packs import split_pack
from echomq.archive.quiet_gc import quiet_gc
from echomq.archive.report import ArchiveReport
from echomq.archive.slices import GENESIS, SliceContent, SliceMeta, SliceRef
from echomq.archive.stream_ids import ZERO_ID, id_lt, last_id_of, parse_stream_id
from echomq.errors import ArchiveError, ChainBroken, InvalidArgument, ManifestMissing, MissingSlice
from echomq.progress import Tick, bars

if TYPE_CHECKING:
    from echomq.archive.remote import Remote

PREFETCH = 2
BATCH_ENTRIES = 10_000
"""Entries of checked slices committed to the floor in one transaction (see ``_Batch``)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """The objects of one queue that form its contiguous history, in order.

    ``chain`` lists the objects to read; ``links`` the slices they hold (first, last and
    the digest each must have, from the manifest) and ``digests`` those digests, both
    empty when the plan was rebuilt from the chain of names alone (``rebuilt``).
    ``parts`` says which slices each object holds (a compaction's pack holds many) and
    ``packs`` each pack's own digest (None: a plain slice). ``base`` is where a pruned
    chain starts.
    """

    queue: str
    chain: tuple[SliceRef, ...]
    head: str
    orphans: tuple[SliceRef, ...] = ()
    digests: tuple[str, ...] = ()
    rebuilt: bool = False
    links: tuple[Link, ...] = ()
    parts: tuple[tuple[Link, ...], ...] = ()
    packs: tuple[str | None, ...] = ()
    base: Base = Base()


@dataclass(slots=True)
class QueueReport(ArchiveReport):
    """What restore or verify found for one queue. ``head_digest`` fixes the whole chain:
    keep it somewhere else to check the bucket against later (``verify(pins=...)``)."""

    skipped: int = 0
    head: str = ZERO_ID
    orphans: list[str] = field(default_factory=list)
    head_digest: str = GENESIS
    rebuilt: bool = False
    objects: int = 0
    pruned_through: str = ZERO_ID


def plan(remote: Remote, queue: str, *, rebuild_manifest: bool = False,
         until: str | None = None) -> Plan:
    """The chain of ``queue``'s slices from ``0-0`` (or from where a prune left it) as the
    manifest lists it; ``MissingSlice`` if a listed object is absent, ``ManifestMissing``
    if there are slices but no manifest (unless ``rebuild_manifest``: then the chain of
    names alone). With ``until`` (a stream id) the chain ends at the object holding it:
    what comes after is neither required nor reported."""
    refs = remote.list_slices(queue)
    manifest = remote.read_manifest(queue)
    if manifest is not None:
        return _manifest_plan(remote, queue, refs, manifest, until)
    if refs and not rebuild_manifest:
        raise ManifestMissing(
            f"{queue}: {remote.address(queue + '/manifest.json')} is missing but "
            f"{len(refs)} slices are there: the newest history may have been cut. Restore "
            "from the chain alone only if you accept that (rebuild_manifest=True, "
            "--rebuild-manifest); the report then says the head it found"
        )
    return _name_plan(remote, queue, refs)


def _manifest_plan(remote: Remote, queue: str, refs: list[SliceRef], manifest: Manifest,
                   until: str | None = None) -> Plan:
    """Every object the manifest lists must be there; anything else is an orphan."""
    present = set(refs)
    objects = manifest.objects()
    links = manifest.chain
    if until is not None:
        objects = [o for o in objects if not id_lt(until, o[0].first)]
        links = tuple(link for link in links if not id_lt(until, link[0]))
        refs = [r for r in refs if not id_lt(until, r.first)]
    for number, (ref, _, _) in enumerate(objects, 1):
        if ref not in present:
            later = [r for r in refs if id_lt(ref.prev, r.first)]
            listed = f"; the next one listed is {later[0].name}" if later else ""
            raise MissingSlice(
                f"{queue}: {remote.address(ref.name)} is missing: the manifest lists it as "
                f"slice {number} of {len(objects)}, after {ref.prev}{listed}"
            )
    chain = tuple(o[0] for o in objects)
    on_chain = set(chain)
    return Plan(queue, chain, manifest.head, tuple(r for r in refs if r not in on_chain),
                tuple(link[2] for link in links), links=links,
                parts=tuple(o[1] for o in objects), packs=tuple(o[2] for o in objects),
                base=manifest.base)


def _name_plan(remote: Remote, queue: str, refs: list[SliceRef]) -> Plan:
    """The longest chain of ``prev`` links from ``0-0`` (no manifest to follow), or from
    the oldest slice's ``prev`` when none follows ``0-0`` (a pruned queue)."""
    by_prev: dict[str, list[SliceRef]] = defaultdict(list)
    for ref in refs:
        by_prev[ref.prev].append(ref)
    # How far the chain can reach from each slice (successors start after it ends).
    reach: dict[SliceRef, tuple[int, int]] = {}
    for ref in sorted(refs, key=SliceRef.sort_key, reverse=True):
        best = ref.sort_key()[1]
        for nxt in by_prev.get(ref.last, []):
            best = max(best, reach.get(nxt, best))
        reach[ref] = best
    chain: list[SliceRef] = []
    current = ZERO_ID if by_prev.get(ZERO_ID) or not refs else min(
        (r.prev for r in refs), key=parse_stream_id)
    start = current
    while by_prev.get(current):
        ref = max(by_prev[current], key=lambda r: (reach[r], r.sort_key()))
        chain.append(ref)
        current = ref.last
    on_chain = set(chain)
    orphans = tuple(r for r in refs if r not in on_chain)
    beyond = [r for r in orphans if id_lt(current, r.last)]
    if beyond:
        raise MissingSlice(
            f"{queue}: the slices after {current} are missing in "
            f"{remote.address(queue + '/slices/')}: the next one listed, {beyond[0].name}, "
            f"follows {beyond[0].prev}"
        )
    return Plan(queue, tuple(chain), current, orphans, rebuilt=True,
                base=Base(start, "") if start != ZERO_ID else Base())


class _Chain:
    """Checks, slice by slice, that what is read is what the manifest, the floor and the
    previous slice say it must be."""

    def __init__(self, remote: Remote, the_plan: Plan, floor: Floor | None,
                 until: str | None = None) -> None:
        self.remote = remote
        self.plan = the_plan
        self.expected: dict[str, str] = dict(zip((link[0] for link in the_plan.links),
                                                 the_plan.digests, strict=False))
        self.by_last: dict[str, str] = {link[1]: link[2] for link in the_plan.links}
        self.by_last[ZERO_ID] = GENESIS
        if the_plan.base.through != ZERO_ID and (the_plan.base.digest or not the_plan.rebuilt):
            self.by_last[the_plan.base.through] = the_plan.base.digest
        self.seen: list[str] = []
        if floor is not None:
            self._against_floor(floor, until)

    def _against_floor(self, floor: Floor, until: str | None) -> None:
        """Every slice this floor uploaded or restored must be on the chain, same digest
        (up to ``until``, where a point-in-time plan ends; from the base on, where a prune
        the floor has not applied yet ends the chain)."""
        chain = ({(link[0], link[1]) for link in self.plan.links} if self.plan.links
                 else {(r.first, r.last) for r in self.plan.chain})  # a plan of names alone
        for meta in floor.uploaded_slices(self.plan.queue):
            if until is not None and id_lt(until, meta.first):
                break
            if not id_lt(self.plan.base.through, meta.last):
                continue  # dropped by a prune of the bucket
            if (meta.first, meta.last) not in chain and id_lt(self.plan.head, meta.last):
                raise MissingSlice(
                    f"{self.plan.queue}: the floor uploaded {self.remote.address(meta.name)} "
                    f"(through {meta.last}) but the bucket's chain ends at {self.plan.head}: "
                    "its newest history was removed"
                )
            if (meta.first, meta.last) not in chain:
                raise ChainBroken(
                    f"{self.remote.address(meta.name)}: the floor uploaded this slice but the "
                    "bucket's chain does not hold it: the bucket's history was rewritten"
                )
            known = self.expected.setdefault(meta.first, meta.digest)
            if known != meta.digest:
                raise ChainBroken(
                    f"{self.remote.address(meta.name)}: the manifest records digest {known}, "
                    f"but the floor uploaded {meta.digest}: the slice was rewritten"
                )

    def prev_digest(self, index: int) -> str | None:
        """The digest object ``index`` must chain from (None: unknown, not checked)."""
        return self.by_last.get(self.plan.chain[index].prev) if self.plan.chain else None

    def slices_of(self, index: int, content: SliceContent) -> list[SliceContent]:
        """The slices object ``index`` holds: itself, or a pack split back into them."""
        links = self.plan.parts[index] if self.plan.parts else ()
        pack = self.plan.packs[index] if self.plan.packs else None
        if pack is None:
            return [content]
        where = self.remote.address(content.meta.name)
        if content.meta.digest != pack:
            raise ChainBroken(f"{where}: the pack's digest is {content.meta.digest} but "
                              f"{pack} was recorded when it was written: it was rewritten")
        return split_pack(content, links, where)

    def check(self, content: SliceContent, prev_digest: str | None) -> str:
        """Raise :class:`ChainBroken` naming the slice unless it is the expected one."""
        meta = content.meta
        where = self.remote.address(meta.name)
        if prev_digest is not None and meta.prev_digest != prev_digest:
            raise ChainBroken(
                f"{where}: it follows a slice with digest {meta.prev_digest or '(none)'}, but "
                f"the slice before it has digest {prev_digest or '(none)'}: this slice or "
                "the one before was rewritten, or they were reordered"
            )
        want = self.expected.get(meta.first)
        if want is not None and meta.digest != want:
            raise ChainBroken(
                f"{where}: its digest is {meta.digest} but {want} was recorded when it was "
                "uploaded: the slice was rewritten"
            )
        self.seen.append(meta.digest)
        return meta.digest


def until_id(value: int | datetime | str) -> str:
    """The last stream id a point-in-time restore keeps: a stream id as given, or every id
    of the millisecond ``value`` (ms since the epoch or a datetime, naive means UTC) and
    before it."""
    if isinstance(value, str):
        if "-" not in value:
            raise InvalidArgument(f"until is a stream id ('ms-seq'), ms or a datetime, "
                                  f"got {value!r}")
        first, seq = parse_stream_id(value)
        return f"{first}-{seq}"
    ms = to_ms(value)
    if ms is None or ms < 0:
        raise InvalidArgument(f"until must be a time at or after the epoch, got {value!r}")
    return last_id_of(ms)


def _cut(content: SliceContent, until: str) -> SliceContent | None:
    """The part of a (verified) slice at or before ``until``, as a slice of its own with no
    digest: the floor keeps its entries but never counts it as uploaded, so a later restore
    without a cut replaces it with the whole slice."""
    kept = [item for item in content.items if not id_lt(until, item[0])]
    if not kept:
        return None
    meta = content.meta
    return SliceContent(SliceMeta(meta.queue, kept[0][0], kept[-1][0], meta.prev, len(kept),
                                  "", 0, "", meta.prev_digest), b"", kept)


def pull(remote: Remote, floor: Floor, queue: str, tick: Tick | None = None, *,
         rebuild_manifest: bool = False, until: str | None = None) -> tuple[int, QueueReport]:
    """Commit every chain slice past the floor's checkpoint; returns (new slices, report).

    Every slice is checked against the chain, the manifest and what this floor recorded
    before it is committed. Downloads run ``PREFETCH`` slices ahead of the commits, so the
    object store's latency overlaps the floor's work. With ``until`` (a stream id) only the
    chain up to the slice holding it is read and checked, and of that slice only the
    entries up to ``until`` are kept.
    """
    the_plan = plan(remote, queue, rebuild_manifest=rebuild_manifest, until=until)
    report = _report(the_plan)
    links = _Chain(remote, the_plan, floor, until)
    _start_at_base(floor, the_plan, until)
    checkpoint = floor.checkpoint(queue)
    start = next((i for i, ref in enumerate(the_plan.chain) if id_lt(checkpoint, ref.last)),
                 len(the_plan.chain))
    todo = the_plan.chain[start:]
    if until is not None:
        report.head = min(the_plan.head, until, key=parse_stream_id)
    report.skipped = start
    if tick and report.skipped:
        tick(report.skipped)
    prev_digest = links.prev_digest(start) if start < len(the_plan.chain) else None
    index = start
    with closing(_fetched(remote, todo)) as wholes, _Batch(floor, report) as batch:
        for whole in wholes:
            for content in links.slices_of(index, whole):
                if until is not None and id_lt(until, content.meta.first):
                    break
                prev_digest = links.check(content, prev_digest)
                kept: SliceContent | None = content
                if until is not None and id_lt(until, content.meta.last):
                    kept = _cut(content, until)
                if kept is not None:
                    batch.add(kept)
            index += 1
            if tick:
                tick(1)
    report.head_digest = _head_digest(the_plan, links)
    return report.slices, report


def _fetched(remote: Remote, refs: Sequence[SliceRef]
             ) -> Generator[SliceContent, None, None]:
    """``refs``' objects read and checked (``get_slice``), in order; ``PREFETCH`` of them
    are downloaded and decoded ahead by threads, so the store's latency and the decode
    (gunzip and sha256 let other threads run) overlap the caller's work. Close it (it
    waits for the reads in flight) when stopping early."""
    later = iter(refs)
    with ThreadPoolExecutor(max_workers=PREFETCH, thread_name_prefix="emq-restore") as pool:
        pending: deque[Future[SliceContent]] = deque(
            pool.submit(remote.get_slice, ref) for ref in islice(later, PREFETCH))
        while pending:
            whole = pending.popleft().result()
            nxt = next(later, None)
            if nxt is not None:
                pending.append(pool.submit(remote.get_slice, nxt))
            yield whole


class _Batch:
    """Checked slices waiting for one floor transaction: small slices (a fold every 30 s,
    a pack split back into them) commit by the ``BATCH_ENTRIES``, since each synced commit
    costs milliseconds; a crash loses only the uncommitted batch, which a rerun fetches
    again from the floor's checkpoint."""

    def __init__(self, floor: Floor, report: QueueReport) -> None:
        self.floor, self.report = floor, report
        self.contents: list[SliceContent] = []
        self.entries = 0

    def add(self, content: SliceContent) -> None:
        self.contents.append(content)
        self.entries += len(content.items)
        if self.entries >= BATCH_ENTRIES:
            self.commit()

    def __enter__(self) -> _Batch:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Commit what is waiting, also when the restore stops on an error: every slice
        here passed its checks, so a rerun starts after it (a second failure of the floor
        itself is not allowed to hide the first)."""
        if kind is None:
            self.commit()
            return
        with suppress(ArchiveError):
            self.commit()

    def commit(self) -> None:
        if not self.contents:
            return
        with quiet_gc():
            results = self.floor.commit_slices(self.contents, uploaded=True)
        for added in results:
            if added is not None:
                self.report.slices += 1
                self.report.entries += added[0]
                self.report.quarantined += added[1]
        self.contents, self.entries = [], 0


def _start_at_base(floor: Floor, the_plan: Plan, until: str | None) -> None:
    """A floor behind a pruned chain's start forgets what the bucket forgot and starts
    there (a fresh floor: everything dropped counts as accounted for the gap checks)."""
    base = the_plan.base
    if base.through == ZERO_ID:
        return
    if until is not None and id_lt(until, base.through):
        raise InvalidArgument(
            f"{the_plan.queue}: the archive was pruned through {base.through}; a point in "
            f"time before it ({until}) is no longer held"
        )
    checkpoint = floor.checkpoint(the_plan.queue)
    if id_lt(checkpoint, base.through):
        floor.drop_through(the_plan.queue, base.through, digest=base.digest,
                           accounted=base.entries if checkpoint == ZERO_ID else None)


def _report(the_plan: Plan) -> QueueReport:
    return QueueReport(the_plan.queue, head=the_plan.head,
                       orphans=[r.name for r in the_plan.orphans], rebuilt=the_plan.rebuilt,
                       objects=len(the_plan.chain), pruned_through=the_plan.base.through)


def _head_digest(the_plan: Plan, links: _Chain) -> str:
    """The digest of the chain's newest slice, as read or as recorded."""
    if links.seen:
        return links.seen[-1]
    if not the_plan.chain:
        return the_plan.base.digest
    if the_plan.links:
        return the_plan.links[-1][2]
    return links.expected.get(the_plan.chain[-1].first, "")


def verify_queue(remote: Remote, queue: str, tick: Tick | None = None, *,
                 floor: Floor | None = None, rebuild_manifest: bool = False,
                 pin: str | None = None) -> QueueReport:
    """Read and check every chain slice of ``queue`` without writing anything: checksums,
    the chain of digests, the manifest's digests, the ``floor``'s (when given) and ``pin``
    (a digest kept elsewhere that must be on the chain)."""
    the_plan = plan(remote, queue, rebuild_manifest=rebuild_manifest)
    report = _report(the_plan)
    links = _Chain(remote, the_plan, floor)
    prev_digest = links.prev_digest(0)
    with closing(_fetched(remote, the_plan.chain)) as wholes:
        for index, whole in enumerate(wholes):
            for content in links.slices_of(index, whole):
                prev_digest = links.check(content, prev_digest)
                report.slices += 1
                report.entries += content.meta.count
            if tick:
                tick(1)
    report.head_digest = _head_digest(the_plan, links)
    if pin is not None and pin not in links.seen:
        raise ChainBroken(
            f"{queue}: the kept digest {pin} is not on the chain in "
            f"{remote.address(queue + '/')} (head {the_plan.head}, digest "
            f"{report.head_digest}): the bucket's history was rewritten or cut"
        )
    return report


def restore(remote: Remote, floor_path: Floor | str | os.PathLike[str],
            queues: list[str] | None = None, progress: bool | None = None, *,
            rebuild_manifest: bool = False, until: int | datetime | str | None = None
            ) -> dict[str, QueueReport]:
    """Rebuild (or resume rebuilding) a floor from ``remote`` alone, verified.

    A queue whose bucket has slices but no manifest is refused with
    :class:`ManifestMissing` unless ``rebuild_manifest``: then what the chain of slices
    holds is restored and the report's ``head``/``head_digest`` say where it ends.

    ``until`` restores a point in time: exactly the outcomes recorded up to it (a stream
    id, inclusive, or a time: ms since the epoch or a datetime, every entry of that
    millisecond and before), verified along the chain up to the slice that holds it;
    slices after it are never read. Into a floor already past that point nothing is
    removed: restore into a fresh path.
    """
    last = None if until is None else until_id(until)
    floor = floor_path if isinstance(floor_path, Floor) else Floor(floor_path)
    reports: dict[str, QueueReport] = {}
    try:
        names = queues if queues is not None else remote.queues()
        with bars(progress, "restore") as task:
            for queue in names:
                total = len(remote.list_slices(queue))
                _, reports[queue] = pull(remote, floor, queue, task(queue, total),
                                         rebuild_manifest=rebuild_manifest, until=last)
    finally:
        if floor is not floor_path:
            floor.close()
    return reports


def verify(remote: Remote, queues: list[str] | None = None, progress: bool | None = None, *,
           floor: Floor | str | os.PathLike[str] | None = None, rebuild_manifest: bool = False,
           pins: Mapping[str, str] | None = None) -> dict[str, QueueReport]:
    """Check every queue's chain, every object's checksum and every digest; writes nothing.

    With ``floor``, every slice that floor uploaded must be in the bucket unchanged; with
    ``pins`` (queue -> a ``head_digest`` kept from an earlier report), that digest must
    still be on the queue's chain. Only these catch a forger who rewrote the whole chain
    and the manifest consistently.
    """
    pins = pins or {}
    reports: dict[str, QueueReport] = {}
    with _floor(floor) as opened, bars(progress, "verify") as task:
        names = queues if queues is not None else _verified_queues(remote, opened)
        for queue in names:
            reports[queue] = verify_queue(remote, queue,
                                          task(queue, len(remote.list_slices(queue))),
                                          floor=opened, rebuild_manifest=rebuild_manifest,
                                          pin=pins.get(queue))
    return reports


def _verified_queues(remote: Remote, floor: Floor | None) -> list[str]:
    """The bucket's queues, and every queue the floor uploaded (a queue removed from the
    bucket altogether is a cut history too)."""
    names = set(remote.queues())
    if floor is not None:
        names.update(q for q in floor.queues() if floor.uploaded_slices(q))
    return sorted(names)


@contextmanager
def _floor(floor: Floor | str | os.PathLike[str] | None) -> Iterator[Floor | None]:
    """The floor to compare against (opened here when given as a path)."""
    if floor is None or isinstance(floor, Floor):
        yield floor
        return
    with Floor(floor) as opened:
        yield opened
