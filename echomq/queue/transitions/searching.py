"""The catalogue's search: ``search_page``, one page of ids filtered where the rows are
(the dashboard's search over live jobs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from echomq.queue.executors import Call
from echomq.queue.keys import Keys

ROW_FIELDS = ("id", "name", "state", "created_at", "finished_at", "attempts", "payload")
"""A match's fields, in the order search_page-1.lua answers them."""


def search_page_call(keys: Keys, state_set: str, ids: Sequence[str], *, name: str,
                     needle: str, escaped: str, time_field: str, since: int | None,
                     until: int | None, most: int, payload_chars: int | None) -> Call:
    """search_page-1.lua: examine ``ids`` in order, keep those whose name holds ``name``,
    whose ``time_field`` is in ``[since, until)`` and whose payload holds ``needle`` (or
    its stored form ``escaped``), stopping at the ``most``-th match; each match's payload
    comes back cut to ``payload_chars`` (None: whole; 0: none)."""
    return ("search_page", [state_set],
            [keys.base, name, needle, escaped, time_field,
             "" if since is None else since, "" if until is None else until, most,
             "" if payload_chars is None else payload_chars, *ids])


def search_page_reply(reply: Any) -> tuple[int, list[dict[str, str | None]]]:
    """search_page's reply: (ids examined, each match as a dict of :data:`ROW_FIELDS`)."""
    scanned = int(reply[0])
    rows = [dict(zip(ROW_FIELDS, (None if v is None else str(v) for v in row),
                     strict=False)) for row in reply[1:]]
    return scanned, rows
