"""The catalogue's cron specs: a schedule's stored spec replaced only if unchanged since it
was read (``cron_swap``): how ``schedule``, ``pause_schedule`` and ``resume_schedule``
write, so none of them loses another's change."""

from __future__ import annotations

from typing import Any

from echomq.queue.executors import Call
from echomq.queue.keys import Keys


def swap_call(keys: Keys, name: str, read: str | None, spec: str) -> Call:
    """cron_swap-1.lua: store ``spec`` as ``name``'s if its stored spec is still ``read``
    (None: if none is stored)."""
    return ("cron_swap", [keys.schedules], [name, read or "", spec])


def swapped(reply: Any) -> bool:
    """cron_swap's reply: whether the spec was stored (False: changed meanwhile)."""
    return bool(int(reply))
