"""The catalogue's cron specs: a schedule's stored spec replaced only if unchanged since it
was read (``cron_swap``): how ``schedule``, ``pause_schedule`` and ``resume_schedule``
write, so none of them loses another's change; and a schedule's fire (``cron_fire``), which
adds its job only for the spec it was computed from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echomq.queue import validate
from echomq.queue.executors import Call
from echomq.queue.keys import Keys
from echomq.queue.replies import raise_for_reply


def swap_call(keys: Keys, name: str, read: str | None, spec: str) -> Call:
    """cron_swap-1.lua: store ``spec`` as ``name``'s if its stored spec is still ``read``
    (None: if none is stored)."""
    return ("cron_swap", [keys.schedules], [name, read or "", spec])


def swapped(reply: Any) -> bool:
    """cron_swap's reply: whether the spec was stored (False: changed meanwhile)."""
    return bool(int(reply))


# -- cron_fire ----------------------------------------------------------------------


@dataclass(frozen=True)
class CronFire:
    """One fire of one schedule: what cron_fire-4.lua needs to enqueue it exactly once."""

    name: str
    spec: str
    """The stored spec JSON the fire was computed from (the script refuses another)."""
    at_ms: int
    job_id: str
    payload: str
    options: Sequence[str | int]
    """add's options, in add_call's order: delay_ms, priority, max_attempts, group, name."""


def cron_fire_call(keys: Keys, fire: CronFire) -> Call:
    """cron_fire-4.lua: advance the schedule's last fire to ``fire.at_ms`` and add its job,
    in one call; refused when that time is not after the stored last fire."""
    keys.job(fire.job_id)  # the gate, before the wire
    validate.epoch_ms(fire.at_ms, "fire time")
    return ("cron_fire", [keys.pending, keys.scheduled, keys.schedules, keys.schedule_fires],
            [keys.base, fire.name, fire.spec, fire.at_ms, fire.job_id, fire.payload,
             *fire.options])


def cron_fired(reply: Any, name: str) -> str | None:
    """cron_fire's reply: the job id when this call fired, None when the time was fired
    already (by another scheduler); raises ``ScheduleGone`` when the spec changed."""
    if isinstance(reply, str):
        return reply
    raise_for_reply("cron_fire", int(reply), name)
    return None
