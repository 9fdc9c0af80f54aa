"""Verify: read and check every chain slice of the bucket without writing anything.

The same plan and the same checks as a restore (:mod:`echomq.archive.restore_plan`,
:mod:`echomq.archive.restore_chain`), and two more only a verify can make: every slice a
given floor uploaded must still be in the bucket unchanged, and a ``head_digest`` kept
elsewhere (a pin) must still be on the chain. Only these catch a forger who rewrote the
whole chain and the manifest consistently.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING

from echomq.archive import floor_notes
from echomq.archive.floor import Floor
from echomq.archive.report import QueueReport
from echomq.archive.restore_chain import Chain
from echomq.archive.restore_fetch import fetched
from echomq.archive.restore_plan import plan, report_for
from echomq.errors import ChainBroken, EchoMQError
from echomq.progress import Tick, bars

if TYPE_CHECKING:
    from echomq.archive.remote import Remote


def verify_queue(remote: Remote, queue: str, tick: Tick | None = None, *,
                 floor: Floor | None = None, rebuild_manifest: bool = False,
                 pin: str | None = None) -> QueueReport:
    """Read and check every chain slice of ``queue`` without writing anything: checksums,
    the chain of digests, the manifest's digests, the ``floor``'s (when given) and ``pin``
    (a digest kept elsewhere that must be on the chain)."""
    the_plan = plan(remote, queue, rebuild_manifest=rebuild_manifest)
    report = report_for(the_plan)
    links = Chain(remote, the_plan, floor)
    prev_digest = links.prev_digest(0)
    with closing(fetched(remote, the_plan.chain)) as wholes:
        for index, whole in enumerate(wholes):
            for content in links.slices_of(index, whole):
                prev_digest = links.check(content, prev_digest)
                report.slices += 1
                report.entries += content.meta.count
            if tick:
                tick(1)
    report.head_digest = links.head_digest()
    if pin is not None and pin not in links.seen:
        raise ChainBroken(
            f"{queue}: the kept digest {pin} is not on the chain in "
            f"{remote.address(queue + '/')} (head {the_plan.head}, digest "
            f"{report.head_digest}): the bucket's history was rewritten or cut"
        )
    return report


def verify(remote: Remote, queues: list[str] | None = None, progress: bool | None = None, *,
           floor: Floor | str | os.PathLike[str] | None = None, rebuild_manifest: bool = False,
           pins: Mapping[str, str] | None = None) -> dict[str, QueueReport]:
    """Check every queue's chain, every object's checksum and every digest; writes nothing.

    With ``floor``, every slice that floor uploaded must be in the bucket unchanged; with
    ``pins`` (queue -> a ``head_digest`` kept from an earlier report), that digest must
    still be on the queue's chain. Only these catch a forger who rewrote the whole chain
    and the manifest consistently. Each queue's verdict is kept in that floor
    (``Floor.last_verify``: the only thing written, and only to the floor).
    """
    pins = pins or {}
    reports: dict[str, QueueReport] = {}
    with _floor(floor) as opened, bars(progress, "verify") as task:
        names = queues if queues is not None else _verified_queues(remote, opened)
        for queue in names:
            try:
                reports[queue] = verify_queue(
                    remote, queue, task(queue, len(remote.list_slices(queue))),
                    floor=opened, rebuild_manifest=rebuild_manifest, pin=pins.get(queue))
            except EchoMQError as exc:
                _note(opened, queue, False, f"{type(exc).__name__}: {exc}")
                raise
            found = reports[queue]
            _note(opened, queue, True, f"{found.slices} slice(s), {found.entries} "
                                       f"entries, head {found.head_digest}")
    return reports


def _note(floor: Floor | None, queue: str, ok: bool, detail: str) -> None:
    """Keep the verdict in the floor (the dashboard's archive page shows it: a page load
    never reads the bucket)."""
    if floor is not None:
        floor_notes.record_verify(floor, queue, ok, int(time.time() * 1000), detail)


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
