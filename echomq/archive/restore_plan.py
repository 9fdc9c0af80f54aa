"""The plan of a restore or a verify: which objects of one queue form its contiguous
history, in order, decided before anything is read.

The manifest lists every slice (ids and digest) up to its head, and each must be there
(:class:`~echomq.errors.MissingSlice` names the first that is not). A bucket with slices
but no manifest is refused (:class:`~echomq.errors.ManifestMissing`) unless the operator
asks to rebuild from the chain of names alone. A slice that is not on the chain (a driver
that lost its lease, a crash before the manifest moved) is an orphan.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from echomq.archive.manifest import Base, Link, Manifest
from echomq.archive.report import QueueReport
from echomq.archive.slices import SliceRef
from echomq.archive.stream_ids import ZERO_ID, id_lt, parse_stream_id
from echomq.errors import ManifestMissing, MissingSlice

if TYPE_CHECKING:
    from echomq.archive.remote import Remote


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


def report_for(the_plan: Plan) -> QueueReport:
    """The report a restore or a verify of ``the_plan`` starts counting in."""
    return QueueReport(the_plan.queue, head=the_plan.head,
                       orphans=[r.name for r in the_plan.orphans], rebuilt=the_plan.rebuilt,
                       objects=len(the_plan.chain), pruned_through=the_plan.base.through)


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
