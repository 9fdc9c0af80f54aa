"""Deduplication's options (``add(..., dedup_id=, dedup_ttl_ms=, dedup_mode=)``), gated
before the wire.

A dedup id is held by one job at a time (the hash ``emq:{q}:dedup:<id>``, in the queue's
slot, written by ``add_dedup-3.lua`` in the same call as the job): an add under a held id
creates nothing and answers the holder's id. The modes, modelled on BullMQ's
deduplication (simple, throttle, debounce):

- ``"until_done"``: held until the job finishes: completed, cancelled, dead (no tries
  left, or stalled too often), removed (``remove_job``, ``cancel.request`` of a pending
  job, ``drain``) or its queue obliterated; freed by that same transition. A retry is not
  finishing. ``dedup_ttl_ms`` is an upper bound: the hold lapses then even if the job has
  not finished (a second job may then be added).
- ``"ttl"`` (throttle): held for ``dedup_ttl_ms`` (required) from the first add, whatever
  happens to the job meanwhile.
- ``"debounce"``: held like ``"until_done"``; a later add while the job is still pending or
  scheduled replaces its payload and resets its delay (the new add's ``delay_ms``, from
  now; other options stay the first add's) and answers the same id. Once the job is
  active the add changes nothing and answers its id (BullMQ replaces only a delayed job,
  and does not queue a second run behind an active one unless asked:
  ``keepLastIfActive``, not offered here). ``dedup_ttl_ms`` is an upper bound re-armed by
  each replacing add.

The hold's mode decides, whatever a later add asks. A dead job that ``retry_dead`` brings
back runs without its hold (freed when it died). Purging a finished row frees nothing:
the hold was freed when the job finished, and a hold names its job, so freeing never
touches a hold a newer job took since.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from echomq.errors import InvalidArgument
from echomq.queue import validate
from echomq.queue.keys import Keys

DedupMode = Literal["until_done", "ttl", "debounce"]
MODES: tuple[str, ...] = ("until_done", "ttl", "debounce")


@dataclass(frozen=True)
class Dedup:
    """One add's deduplication, gated: its hold's key, id, mode and TTL (None: none)."""

    key: str
    id: str
    mode: str
    ttl_ms: int | None


def dedup_of(keys: Keys, dedup_id: str | None, dedup_ttl_ms: int | None,
             dedup_mode: str) -> Dedup | None:
    """The gated options, or None for an add without ``dedup_id`` (then the other two
    must keep their defaults: a TTL or a mode without an id is a mistake, refused)."""
    if dedup_id is None:
        if dedup_ttl_ms is not None or dedup_mode != "until_done":
            raise InvalidArgument("dedup_ttl_ms and dedup_mode need a dedup_id")
        return None
    key = keys.dedup(dedup_id)  # the gate, before the wire
    if dedup_mode not in MODES:
        raise InvalidArgument(
            f"dedup_mode must be one of {', '.join(MODES)}, got {dedup_mode!r}")
    if dedup_ttl_ms is not None:
        validate.positive_int(dedup_ttl_ms, "dedup_ttl_ms")
    elif dedup_mode == "ttl":
        raise InvalidArgument("dedup_mode 'ttl' needs dedup_ttl_ms (how long the id is held)")
    return Dedup(key, dedup_id, dedup_mode, dedup_ttl_ms)
