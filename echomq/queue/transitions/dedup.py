"""The catalogue's deduplication: ``add_dedup``, one job added under a dedup id (or the
holder's id answered) in one call; its reply is read by :func:`intake.added`."""

from __future__ import annotations

from collections.abc import Sequence

from echomq.queue.dedup import Dedup
from echomq.queue.executors import Call
from echomq.queue.keys import Keys


def add_dedup_call(keys: Keys, options: Sequence[str | int], job_id: str, body: str,
                   dedup: Dedup, traceparent: str = "") -> Call:
    """add_dedup-3.lua: add ``body`` (with add's ``options``; ``job_id`` or "" for a
    generated id) unless ``dedup.id`` is held; the reply is ``[id]``: the new job's, or
    the holder's (a debounce hold's pending job takes this payload and delay)."""
    ttl: str | int = "" if dedup.ttl_ms is None else dedup.ttl_ms
    return ("add_dedup", [keys.pending, keys.scheduled, dedup.key],
            [keys.base, *options, traceparent, job_id, body, dedup.id, dedup.mode, ttl])
