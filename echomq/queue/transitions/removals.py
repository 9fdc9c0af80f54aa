"""The catalogue's removals of many rows: retention's ``purge`` and the whole-queue
``drain`` and ``obliterate``, each call beside its reply's parser."""


from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echomq.errors import (
    HistoryNotArchived,
    InvalidArgument,
)
from echomq.queue import validate
from echomq.queue.executors import Call
from echomq.queue.keys import Keys
from echomq.queue.replies import codes_of, raise_for_reply

# -- purge (retention) --------------------------------------------------------------

PURGE_BATCH = 1000
"""Rows one purge call examines at most (the ~1,000-key bound of one Lua call)."""


@dataclass(frozen=True)
class PurgeStep:
    """One purge call's answer: rows forgotten, candidates passed over (the next call's
    offset grows by them), whether candidates remain, and how many candidates stay
    because the archive has not folded them (>0: the purge stops)."""

    forgotten: int
    passed: int
    more: bool
    held: int


def purge_call(keys: Keys, state: str, keep: int, older_than_ms: int | None, offset: int,
               batch: int = PURGE_BATCH) -> Call:
    """purge-2.lua: forget up to ``batch`` of the oldest finished rows of ``state``
    ("completed" or "dead") beyond the newest ``keep`` and finished before ``older_than_ms``
    ago (None: any age), skipping the first ``offset`` candidates; on a declared queue
    only rows whose outcome the archive has folded."""
    state_key = keys.completed if state == "completed" else keys.dead
    age = -1 if older_than_ms is None else older_than_ms
    return ("purge", [state_key, keys.meta], [keys.base, keep, batch, age, offset])


def purged(reply: Any) -> PurgeStep:
    """purge's reply ``{forgotten, passed, more, held}``."""
    forgotten, passed, more, held = (int(x) for x in reply)
    return PurgeStep(forgotten, passed, more == 1, held)


# -- drain, obliterate --------------------------------------------------------------


BULK_BATCH = 1000
"""The most one drain or obliterate call deletes: jobs (each a row and its set entry, plus
the lanes visited) for drain, keys for obliterate. The verbs loop."""

DRAIN_START, DRAIN_DONE = "pending", "done"


def drain_call(keys: Keys, position: str, scheduled: bool, batch: int = BULK_BATCH) -> Call:
    """drain-2.lua: one batch of pending (then lane, then scheduled) jobs from ``position``."""
    return ("drain", [keys.pending, keys.scheduled],
            [keys.base, validate.positive_int(batch, "batch"), position,
             "1" if scheduled else "0"])


def drained(reply: Any) -> tuple[int, str]:
    """drain's reply: how many jobs the call removed, and where the next call goes on
    (``DRAIN_DONE``: nothing is left)."""
    removed, position = reply
    return int(removed), str(position)


def obliterate_begin_call(keys: Keys, force: bool) -> Call:
    """obliterate_begin-3.lua: check the queue may go (unless ``force``), then mark it."""
    return ("obliterate_begin", [keys.meta, keys.active, keys.completions],
            ["1" if force else "0"])


def obliterate_begun(reply: Any, queue: str) -> None:
    """obliterate_begin's reply: return when marked; raise ``QueueBusy`` (jobs active) or
    ``HistoryNotArchived`` (declared entries not yet archived), naming how many."""
    code, count = (int(part) for part in reply)
    error = codes_of("obliterate_begin").get(code)
    if error is None:
        return
    if issubclass(error, HistoryNotArchived):
        raise error(f"obliterate {queue!r}: its declared outcome stream still holds {count} "
                    "entries the archive has not folded and trimmed; fold them first "
                    "(emq archive fold), or force to lose them")
    raise error(f"obliterate {queue!r}: {count} jobs are active; wait until they settle, "
                "or force (their workers' settles then find no job)")


def obliterate_keys_call(keys: Keys, batch: Sequence[str]) -> Call:
    """obliterate_keys-2.lua: delete ``batch`` (keys under the queue's base) of a marked
    queue, telling each job's parent on another queue through the outbox (kept)."""
    if len(batch) > BULK_BATCH:
        raise InvalidArgument(f"at most {BULK_BATCH} keys per call, got {len(batch)}")
    return ("obliterate_keys", [keys.meta, keys.flow_outbox], [keys.base, *batch])


def obliterated_keys(reply: Any, queue: str) -> int:
    """obliterate_keys' reply: how many keys went; ``QueueBusy`` when the queue is no
    longer marked (another obliterate ended it)."""
    return raise_for_reply("obliterate_keys", int(reply), queue)


def obliterate_end_call(keys: Keys) -> Call:
    """obliterate_end-2.lua: delete the outbox (delivered) and the meta hash, the queue's
    last keys, and its marks."""
    return ("obliterate_end", [keys.meta, keys.flow_outbox], [])


def obliterate_ended(reply: Any, queue: str) -> int:
    """obliterate_end's reply: 1 when the meta hash held settings, 0 when only the marks
    (1 more when an outbox was left); ``QueueBusy`` when not marked."""
    return raise_for_reply("obliterate_end", int(reply), queue)
