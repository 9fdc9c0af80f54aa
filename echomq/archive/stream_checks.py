"""The fold's checks of the stream itself, read through ``XINFO STREAM``.

Before anything is trimmed a fold makes sure the stream still continues the floor's
history: it was not recreated or rolled back below the checkpoint (:class:`StreamRewound`),
and no entry after the checkpoint left it unfolded, trimmed or deleted by someone else
(:class:`StreamGap`, recorded in the floor until an operator acknowledges it).

Other writers may add entries with any id. One ahead of the server clock by more than
:data:`AHEAD_MS` is never EchoMQ's (its settles write ids of their own millisecond), and
folding it would move the checkpoint past every outcome still to come: the fold stops
before it and reports it (``ahead``); the next settle sets it aside (the queue's
``foreign`` list, ``_lib.lua``'s ``emq_set_aside``), and the fold reports those too.
"""

from __future__ import annotations

import logging
from typing import Any

import redis

from echomq.archive.floor import Floor
from echomq.archive.floor_gaps import GapBaseline
from echomq.archive.fold_lease import FoldLease
from echomq.archive.stream_ids import ZERO_ID, id_before, id_key, id_lt, last_id_of
from echomq.archive.stream_read import last_id_through, read_ids, stream_info
from echomq.errors import StreamGap, StreamRewound
from echomq.queue.cluster import slot_ms
from echomq.queue.keys import Keys

log = logging.getLogger("echomq.archive.driver")

AHEAD_MS = 60_000
"""How far ahead of the server clock an id may be and still be folded: the settle
scripts' ``EMQ_AHEAD_MS`` (queue/lua/_lib.lua), beyond which they set an entry aside."""


class StreamChecks:
    """One fold's checks of its queue's stream (a collaborator of
    :class:`~echomq.archive.fold.Fold`): where the fold may end, and what was lost."""

    def __init__(self, client: redis.Redis, floor: Floor, keys: Keys) -> None:
        self.redis = client
        self.floor = floor
        self.keys = keys
        self.queue = keys.queue

    def clock_bound(self) -> str:
        """The last id a fold may take now: the server's clock plus :data:`AHEAD_MS`."""
        return last_id_of(slot_ms(self.redis, self.keys.completions) + AHEAD_MS)

    def foreign_counts(self, bound: str) -> tuple[int, int]:
        """(entries in the stream past ``bound``, entries settles set aside so far)."""
        ahead = len(read_ids(self.redis, self.keys.completions, f"({bound}", 100_000))
        return ahead, int(self.redis.llen(self.keys.foreign))

    def stream_end(self, bound: str | None = None) -> str | None:
        """The last id in the stream now (None: empty), at or before ``bound`` when given
        (:meth:`clock_bound`). Refuses a stream whose last
        generated id went below the floor's checkpoint (recreated, or rolled back by a
        failover): trimming it by id would remove entries the archive never saw."""
        info = stream_info(self.redis, self.keys.completions)
        if info is None:
            return None  # no stream yet
        generated = str(info.get("last-generated-id") or ZERO_ID)
        checkpoint = self.floor.checkpoint(self.queue)
        if id_lt(generated, checkpoint):
            raise StreamRewound(
                f"the outcome stream of {self.queue!r} was last written at {generated}, "
                f"before the floor's checkpoint {checkpoint}: it was recreated or rolled "
                "back. Nothing is folded or trimmed until an operator checks it."
            )
        last = info.get("last-entry")
        end = str(last[0]) if last else None
        if end is not None and bound is not None and id_lt(bound, end):
            end = last_id_through(self.redis, self.keys.completions, bound)
        return end

    def check_gap(self, lease: FoldLease | None = None) -> None:
        """Stop with :class:`StreamGap` (recorded in the floor) when entries after the
        checkpoint left the stream unfolded. Our own trims never pass the checkpoint, so
        they never look like a gap; nor do another driver's, taken over while this one
        stalled past its ``lease``: the lease is renewed before a gap is recorded, and a
        lost one raises ``LeaseLost`` instead."""
        info = stream_info(self.redis, self.keys.completions)
        if info is None:
            return  # no stream
        if "entries-added" not in info:  # before Redis 7: the server cannot tell
            return
        base = self.floor.gap_baseline(self.queue)
        loss = _find_loss(info, base)
        if loss is None:
            self._anchor(info, base)
            return
        if lease is not None:
            lease.renew()  # held throughout: no other driver trimmed meanwhile
        upto, count = loss
        if count is None and base.accounted is not None:
            count = (int(info["entries-added"]) - base.accounted - int(info["length"])
                     + self._count_through(base.checkpoint))
        gap = self.floor.record_gap(self.queue, base.checkpoint, upto, count)
        log.error("archive: %s", gap.describe())
        raise StreamGap(gap)

    def _anchor(self, info: dict[str, Any], base: GapBaseline) -> None:
        """A floor from before the count learns it while nothing at or before its
        checkpoint is left in the stream (then every entry ever added but not present is
        at or before it)."""
        if base.accounted is None and _head_cut(info, base.checkpoint):
            self.floor.anchor_accounted(self.queue, base.checkpoint,
                                        int(info["entries-added"]) - int(info["length"]))

    def _count_through(self, last: str) -> int:
        """How many entries at or before ``last`` the stream still holds (gap path only)."""
        count, start = 0, "-"
        while True:
            batch = read_ids(self.redis, self.keys.completions, start, 10_000, last)
            count += len(batch)
            if len(batch) < 10_000:
                return count
            start = f"({batch[-1]}"


def _head_cut(info: dict[str, Any], checkpoint: str) -> bool:
    """Nothing at or before ``checkpoint`` is left in the stream."""
    first = info.get("first-entry")
    return not first or id_lt(checkpoint, str(first[0]))


def _find_loss(info: dict[str, Any], base: GapBaseline) -> tuple[str, int | None] | None:
    """(the highest lost id bound, how many were lost) or None when nothing was lost.

    Deletions (XDEL) after what the floor holds raise ``max-deleted-entry-id`` past it.
    Trims cut the head: when nothing at or before the checkpoint is left, every entry
    ever added but not present was either accounted for by the floor or lost. The count
    is ``None`` when it needs the stream counted (the caller does it).
    """
    held = max(base.checkpoint, base.acknowledged_upto, key=id_key)
    deleted = str(info.get("max-deleted-entry-id") or ZERO_ID)
    head_cut = _head_cut(info, base.checkpoint)
    missing = None
    if head_cut and base.accounted is not None:
        missing = int(info["entries-added"]) - int(info["length"]) - base.accounted
    if not id_lt(held, deleted) and not (missing is not None and missing > 0):
        return None
    bounds = [deleted] if id_lt(held, deleted) else []
    if head_cut:
        first = info.get("first-entry")
        bounds.append(id_before(str(first[0])) if first
                      else str(info.get("last-generated-id") or ZERO_ID))
    return max(bounds, key=id_key), missing
