"""The dashboard's search over live jobs: by id, name, state, time range and payload.

Bounded and paged: one request reads at most :data:`SCAN_BOUND` rows of one state's
sorted set, by rank from a cursor (``ZRANGE`` of the ids), filters them where they are
(``search_page-1.lua``: one ``HMGET`` per id inside one call, stopping at the
:data:`MATCHES`-th match, only the matches coming back) and says how far it got. The
next page starts where this one stopped; a queue of a million jobs costs the same per
request as one of a thousand. A search of finished jobs by finish time reads only the
score range (``ZRANGE ... BYSCORE``), whose ``ZCOUNT`` is the total. A ``key=value``
match is narrowed on the server by the value's text, then checked on the parsed JSON
here.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import echomq
from echomq.errors import InvalidArgument
from echomq.queue.connection import Connection
from echomq.queue.listing import page_ids, search_page

SCAN_BOUND = 1000
"""The most job rows one search request reads (its cost is bounded by this, not by the
queue's size)."""
MATCHES = 50
"""The most matches one page shows; the next page starts after the last one."""
QUEUE_BOUND = 1000
"""The most queues one search by id without a queue looks in."""
EXCERPT = 200
"""Characters of a payload shown in a result row."""
FINISHED_STATES = ("completed", "dead")
"""The states whose sorted set is scored by finish time."""
_FIELDS = ("name", "state", "created_at", "finished_at", "attempts")


@dataclass(frozen=True)
class PayloadMatch:
    """A payload filter: a substring of its JSON text, or ``key.path=value`` on its JSON."""

    text: str
    json_path: tuple[str, ...] = ()
    json_value: Any = None
    escaped: str = ""
    """``text`` as it sits in a stored payload (JSON-escaped, ASCII: ``é`` is ``\\u00e9``)."""

    @classmethod
    def parse(cls, given: str, mode: str) -> PayloadMatch:
        if mode == "text":
            escaped = json.dumps(given)[1:-1]
            return cls(given, escaped="" if escaped == given else escaped)
        if mode != "json":
            raise InvalidArgument(f"match must be text or json, not {mode[:20]!r}")
        key, eq, raw = given.partition("=")
        if not eq or not key.strip():
            raise InvalidArgument("a JSON match is key=value (a dotted path: kwargs.to=x)")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        return cls(given, tuple(key.strip().split(".")), value)

    @property
    def prefilter(self) -> str:
        """Text every payload a JSON match keeps holds as stored (the value's compact,
        ASCII JSON), for the server to filter on first; '' for an object or a list (their
        keys may be stored in another order)."""
        if isinstance(self.json_value, dict | list):
            return ""
        return json.dumps(self.json_value, separators=(",", ":"))

    def matches(self, payload: str | None) -> bool:
        if payload is None:
            return False
        if not self.json_path:
            return self.text in payload or bool(self.escaped) and self.escaped in payload
        try:
            found: Any = json.loads(payload)
        except ValueError:
            return False
        for step in self.json_path:
            if isinstance(found, dict) and step in found:
                found = found[step]
            elif isinstance(found, list) and step.isdigit() and int(step) < len(found):
                found = found[int(step)]
            else:
                return False
        return bool(found == self.json_value or (isinstance(found, str)
                                                 and found == str(self.json_value)))


@dataclass(frozen=True)
class LiveQuery:
    """One live search, checked: on one queue and one state unless it is by id."""

    queue: str | None
    state: str = "pending"
    job_id: str | None = None
    name: str | None = None
    time_of: str = "created"
    since: int | None = None
    until: int | None = None
    payload: PayloadMatch | None = None
    start: int = 0


@dataclass
class LivePage:
    """What one request found and how far it read."""

    matches: list[dict[str, Any]] = field(default_factory=list)
    scanned: int = 0
    """Rows examined by this request."""
    total: int = 0
    """Rows in the range searched (the state, or its finish-time range)."""
    start: int = 0
    next_start: int | None = None
    rows_read: int = 0
    """Job rows read on the server (one ``HMGET`` each): at most the bound."""
    by_id: bool = False


def _int(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def search(conn: Connection, query: LiveQuery, queues: list[str]) -> LivePage:
    """One page of ``query``'s matches (``queues``: where a search by id alone looks)."""
    if query.job_id:
        return _by_id(conn, query, queues)
    if not query.queue:
        raise InvalidArgument("choose a queue (a search by id alone looks in every queue)")
    keys = conn.keys(query.queue)
    by_score = query.state in FINISHED_STATES and query.time_of == "finished"
    if by_score:
        key = keys.completed if query.state == "completed" else keys.dead
        low = "-inf" if query.since is None else str(query.since)
        high = "+inf" if query.until is None else f"({query.until}"
        total = int(conn.redis.zcount(key, low, high))
        raw = conn.redis.zrevrangebyscore(key, high, low, start=query.start, num=SCAN_BOUND)
        ids = [str(i) for i in raw]
    else:
        total = int(getattr(echomq.counts(conn, query.queue), query.state))
        ids = page_ids(conn, query.queue, query.state, start=query.start, count=SCAN_BOUND)
    match = query.payload
    exact = match is not None and bool(match.json_path)
    needle, escaped = ("", "") if match is None else (
        (match.prefilter, "") if exact else (match.text, match.escaped))
    timed = query.since is not None or query.until is not None
    scanned, rows = search_page(
        conn, query.queue, query.state, ids, name=query.name or "", needle=needle,
        escaped=escaped, most=MATCHES, payload_chars=None if exact else EXCERPT * 6,
        time_field=("finished_at" if query.time_of == "finished" else "created_at")
        if timed and not by_score else "", since=query.since, until=query.until)
    page = LivePage(total=total, start=query.start, scanned=scanned, rows_read=len(ids))
    page.matches = [shown(_row(query.queue, str(r["id"]), r)) for r in rows
                    if not exact or (match is not None and match.matches(r["payload"]))]
    end = query.start + scanned
    page.next_start = end if end < total and scanned else None
    return page


def _row(queue: str, job_id: str, values: dict[str, Any]) -> dict[str, Any]:
    payload = values.get("payload")
    return {"queue": queue, "id": job_id, "name": values["name"], "state": values["state"],
            "created_at": _int(values["created_at"]),
            "finished_at": _int(values["finished_at"]),
            "attempts": _int(values["attempts"]) or 0, "payload": payload, "excerpt": None}


def shown(row: dict[str, Any]) -> dict[str, Any]:
    """A matching row with its payload's first :data:`EXCERPT` characters as a person
    reads them (stored payloads are ASCII JSON: ``\\u00e9`` shows as ``é``)."""
    payload = row["payload"]
    if payload is not None:
        with contextlib.suppress(ValueError):
            payload = json.dumps(json.loads(payload), ensure_ascii=False,
                                 separators=(",", ":"))
        row["excerpt"] = payload[:EXCERPT]
    return row


def _by_id(conn: Connection, query: LiveQuery, queues: list[str]) -> LivePage:
    """The job of that id in the chosen queue, or in every known queue (``QUEUE_BOUND``
    of them per request, from the cursor), each looked up with one pipelined ``HMGET``."""
    assert query.job_id is not None
    names = [query.queue] if query.queue else queues[query.start:query.start + QUEUE_BOUND]
    pipe = conn.redis.pipeline(transaction=False)
    for name in names:
        pipe.hmget(conn.keys(name).job(query.job_id), (*_FIELDS, "payload"))
    replies = pipe.execute() if names else []
    page = LivePage(total=1 if query.queue else len(queues), start=query.start,
                    rows_read=len(names), scanned=len(names), by_id=True)
    for name, values in zip(names, replies, strict=True):
        if values[1] is not None:
            page.matches.append(shown(_row(name, query.job_id, dict(
                zip((*_FIELDS, "payload"), values, strict=True)))))
    end = query.start + len(names)
    page.next_start = end if not query.queue and end < len(queues) else None
    return page
