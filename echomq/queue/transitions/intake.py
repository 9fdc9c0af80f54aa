"""The catalogue's intake: a job entering a queue (``add``) and being taken by a worker
(``claim``), each call beside its reply's parser (a cron fire's ``cron_fire`` is with the
schedules' calls, ``cron_specs.py``: a worker's start does not build its record)."""


from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from echomq.errors import (
    InvalidArgument,
)
from echomq.queue.executors import Call
from echomq.queue.keys import Keys

# -- add ----------------------------------------------------------------------------


def add_call(keys: Keys, options: Sequence[str | int], jobs: Sequence[tuple[str, str]],
             traceparent: str = "", replay_of: str = "") -> Call:
    """add-2.lua: enqueue ``(id or "", payload JSON)`` pairs with the same options; its
    reply is one id per job (an existing id for an idempotent add). ``traceparent``
    (tracing on) is kept on each new row for the handler's span; ``replay_of``
    (``"<queue>/<id>"``, archive.replay) names the archived job the new ones replay."""
    if replay_of and any(ord(c) < 32 for c in replay_of):
        raise InvalidArgument(f"replay_of must be printable, got {replay_of!r}")
    args: list[str | int] = [keys.base, *options, traceparent, replay_of]
    for job_id, body in jobs:
        args += [job_id, body]
    return ("add", [keys.pending, keys.scheduled], args)


def added(reply: Any) -> list[str]:
    """add's reply: the ids, in the call's order."""
    return list(map(str, reply))


# -- claim --------------------------------------------------------------------------


def claim_call(keys: Keys, lease_ms: int, count: int) -> Call:
    """claim-3.lua: promote due scheduled jobs, then take up to ``count`` under one lease."""
    return ("claim", [keys.pending, keys.scheduled, keys.active], [keys.base, lease_ms, count])


def claimed(flat: Sequence[Any]) -> list[tuple[str, int, str, str]]:
    """claim's flat reply (the lease deadline, then id, token, payload, name per job) as
    ``(id, token, raw payload, name)``; the payload stays JSON text, a job with no name
    has ``""``."""
    # four slices zipped: the per-job loop stays in C (a comprehension over indices
    # cost ~0.3 us a job)
    return list(zip(flat[1::4], map(int, flat[2::4]), flat[3::4], flat[4::4], strict=True))
