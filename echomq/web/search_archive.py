"""The dashboard's search over the archive floor: the live search's form, on outcomes.

By id it reads the job's history (the floor's job index); otherwise it walks one queue's
outcomes in settle-time order (``Floor.audit``), at most :data:`SCAN_BOUND` per request,
filtering by name and payload (when the queue recorded payloads) here. The cursor is
``<at>:<n>``: the settle time of the last entry examined and how many entries of that
millisecond were already examined, so a page never repeats or skips an entry of a busy
millisecond.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from echomq.errors import InvalidArgument
from echomq.web.search_live import MATCHES, SCAN_BOUND, LivePage, PayloadMatch, shown

if TYPE_CHECKING:
    from echomq.archive.entries import ArchivedEntry
    from echomq.archive.floor import Floor

OUTCOMES = ("completed", "cancelled", "dead")
_CURSOR = re.compile(r"([0-9]{1,15}):([0-9]{1,9})")


@dataclass(frozen=True)
class ArchiveQuery:
    """One archive search, checked."""

    queue: str
    job_id: str | None = None
    name: str | None = None
    outcome: str | None = None
    since: int | None = None
    until: int | None = None
    payload: PayloadMatch | None = None
    cursor: str | None = None

    def keeps(self, entry: ArchivedEntry) -> bool:
        if self.name and self.name not in (entry.name or ""):
            return False
        if self.outcome and entry.outcome.value != self.outcome:
            return False
        if (self.since is not None and entry.at < self.since) or (
                self.until is not None and entry.at >= self.until):
            return False
        return self.payload is None or self.payload.matches(entry.payload)


@dataclass
class ArchivePage(LivePage):
    """A live page's counts, with the archive's cursor."""

    next_cursor: str | None = None


def parse_cursor(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    found = _CURSOR.fullmatch(value)
    if not found:
        raise InvalidArgument(f"cursor: {value[:40]!r} is not <ms>:<count>")
    return int(found.group(1)), int(found.group(2))


def search(floor: Floor, query: ArchiveQuery) -> ArchivePage:
    """One page of ``query``'s matches among the floor's outcomes of its queue."""
    if query.queue not in floor.queues():
        raise InvalidArgument(f"the floor holds no queue {query.queue!r}")
    if query.job_id:
        found = floor.history(query.queue, query.job_id, limit=SCAN_BOUND)
        page = ArchivePage(total=len(found), scanned=len(found), rows_read=len(found),
                           by_id=True)
        page.matches = [_row(e) for e in found if query.keeps(e)][:MATCHES]
        return page
    cursor = parse_cursor(query.cursor)
    since, skip = cursor if cursor is not None else (query.since, 0)
    # one entry past the bound: whether a next page exists, without a third read
    fetched = floor.audit(query.queue, query.outcome, since, query.until,
                          limit=skip + SCAN_BOUND + 1)
    window = fetched[skip:skip + SCAN_BOUND]
    page = ArchivePage(total=floor.status(query.queue).entries, rows_read=len(window))
    examined = skip
    for entry in window:
        examined += 1
        if query.keeps(entry):
            page.matches.append(_row(entry))
            if len(page.matches) >= MATCHES:
                break
    page.scanned = examined - skip
    if examined < len(fetched) and page.scanned:
        last = fetched[examined - 1].at
        same = sum(1 for e in fetched[:examined] if e.at == last)
        page.next_cursor = f"{last}:{same}"
    return page


def _row(entry: ArchivedEntry) -> dict[str, Any]:
    return shown({"queue": entry.queue, "id": entry.job_id, "name": entry.name,
                  "state": entry.outcome.value, "created_at": entry.created_at,
                  "finished_at": entry.at, "attempts": entry.attempts,
                  "payload": entry.payload, "excerpt": None, "stream_id": entry.stream_id})
