"""The catalogue's part for the archive's fold lease: its scripts live in
``echomq/archive/lua/fold_*.lua``, their calls and replies here, like every other
transition's."""


from __future__ import annotations

from typing import Any

from echomq.queue.executors import Call
from echomq.queue.keys import Keys
from echomq.queue.replies import raise_for_reply

# -- the archive's fold lease (script-only: echomq/archive/lua/fold_*.lua) ----------


def fold_acquire_call(keys: Keys, token: str, lease_ms: int) -> Call:
    """fold_acquire-1.lua: take the queue's fold lease for ``lease_ms``, or renew our own."""
    return ("fold_acquire", [keys.archive_lease], [token, lease_ms])


def fold_renew_call(keys: Keys, token: str, lease_ms: int) -> Call:
    """fold_renew-1.lua: extend the lease only while it is ours."""
    return ("fold_renew", [keys.archive_lease], [token, lease_ms])


def fold_release_call(keys: Keys, token: str) -> Call:
    """fold_release-1.lua: let the lease go only while it is ours."""
    return ("fold_release", [keys.archive_lease], [token])


def fold_trim_call(keys: Keys, token: str, minid: str, lease_ms: int, archive: str,
                   also: str, claim: bool) -> Call:
    """fold_trim-3.lua: ``XTRIM MINID`` fenced by the lease and the archive of record."""
    return ("fold_trim", [keys.archive_lease, keys.completions, keys.meta],
            [token, minid, lease_ms, archive, also, "1" if claim else "0"])


def fold_mark_call(keys: Keys, token: str, checkpoint: str, archive: str, also: str,
                   claim: bool) -> Call:
    """fold_mark-2.lua: move the ``folded`` mark, fenced as :func:`fold_trim_call` is."""
    return ("fold_mark", [keys.archive_lease, keys.meta],
            [token, checkpoint, archive, also, "1" if claim else "0"])


def fold_answered(transition: str, reply: Any, queue: str) -> int:
    """A fold-lease script's reply: its success code (1, or 0 for a release or a mark that
    changed nothing, or the entries a trim removed), else the error its code means for
    ``queue`` (``LeaseHeld``, ``LeaseLost``, ``NotDeclared``, ``NotArchiveOfRecord``)."""
    return raise_for_reply(transition, int(reply), queue)
