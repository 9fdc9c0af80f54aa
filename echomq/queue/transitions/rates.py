"""The catalogue's rate limits: setting one (``rate_limit``), a handler's outside limit
(``rate_limited``), and what a claim answers when a limit holds it back, each call beside
its parser. The Lua is ``rate_limit-1.lua``, ``rate_limited-3.lua`` and the hooks of
``claim-3.lua`` in ``_lib_rate.lua``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from echomq.queue.executors import Call
from echomq.queue.keys import Keys, check_name
from echomq.queue.replies import raise_for_code


def rate_limit_call(keys: Keys, group: str | None, limit: tuple[int, int] | None) -> Call:
    """rate_limit-1.lua: set ``(max_jobs, per_ms)`` for the queue (``group=None``) or one
    group, or clear it (``limit=None``). Gates are the caller's (rate_limits.py)."""
    name = "" if group is None else check_name(group, "group")
    max_jobs, per_ms = limit if limit is not None else ("", "")
    return ("rate_limit", [keys.rate], [keys.base, name, max_jobs, per_ms])


def rate_limit_changed(reply: Any) -> bool:
    """rate_limit's reply: False when a clear found no such limit."""
    return int(reply) == 1


def rate_limited_call(keys: Keys, job_id: str, token: int, delay_ms: int) -> Call:
    """rate_limited-3.lua: hand a held job back uncounted; its queue (or group) waits."""
    return ("rate_limited", [keys.active, keys.pending, keys.rate],
            [keys.base, check_name(job_id, "job id"), token, delay_ms])


def rate_waited(reply: Any, job_id: str) -> str:
    """rate_limited's reply: ``"queue"`` or ``"group"`` (who waits); raises ``JobGone``,
    ``StaleToken`` or ``NotActive`` when this holder lost the job."""
    code = int(reply)
    raise_for_code(code, job_id, "rate_limited")
    return "group" if code == 2 else "queue"


def claim_wait_ms(flat: Sequence[Any]) -> int | None:
    """How long a claim that handed out nothing says to wait for a rate limit's next slot
    (claim-3.lua's ``{-wait_ms}``); None for any other reply."""
    if len(flat) == 1 and int(flat[0]) < 0:
        return -int(flat[0])
    return None
