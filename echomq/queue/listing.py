"""Paged listings of a queue's jobs by state: one ZRANGE page, then one pipeline of
HGETALLs. Never a whole set: a page is at most :data:`MAX_PAGE` rows.

Each state's set keeps its own order: pending by claim order (priority, then FIFO),
scheduled by due time, active by lease deadline, completed and dead by when they
finished. ``newest_first`` walks a set from its highest score down.

Pending covers the grouped lanes: the ungrouped pending set comes first, then each
group's lane in the order of the group names; ``start``/``count`` page across them as
one list, and ``newest_first`` reverses the order within each part.
"""

from __future__ import annotations

from typing import Any, cast

from echomq.errors import InvalidArgument
from echomq.models import JobState
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys
from echomq.queue.transitions.searching import search_page_call, search_page_reply
from echomq.records import Job

MAX_PAGE = 1000
"""The most rows one ``list_jobs`` call reads."""


def _state(value: object) -> JobState:
    if isinstance(value, str) and value in JobState._value2member_map_:
        return JobState(value)
    states = ", ".join(s.value for s in JobState)
    raise InvalidArgument(f"state must be one of {states}; got {value!r}")


def list_jobs(
    conn: Connection, queue: str, state: str, *, start: int = 0, count: int = 100,
    newest_first: bool = True,
) -> list[Job]:
    """Up to ``count`` jobs in ``state`` from position ``start`` (see the module doc for
    each state's order). Rows that vanish between the page and the read are skipped.
    A bad state, start or count raises ``InvalidArgument`` before the wire."""
    _state(state)
    validate.non_negative_int(start, "start")
    validate.positive_int(count, "count")
    if count > MAX_PAGE:
        raise InvalidArgument(f"count must be at most {MAX_PAGE}, got {count}")
    keys = conn.keys(queue)
    ids = page_ids(conn, queue, state, start=start, count=count, newest_first=newest_first)
    if not ids:
        return []
    pipe = conn.redis.pipeline(transaction=False)
    for job_id in ids:
        pipe.hgetall(keys.job(job_id))
    rows = cast(list[dict[str, str]], pipe.execute())
    return [Job.from_row(job_id, row) for job_id, row in zip(ids, rows, strict=True) if row]


def page_ids(conn: Connection, queue: str, state: str, *, start: int, count: int,
             newest_first: bool = True) -> list[str]:
    """The ids of :func:`list_jobs`'s page, without their rows: a caller that reads only
    some fields (the dashboard's search: ``HMGET``) pages the same order. Unchecked
    ``start``/``count`` (the caller bounds them)."""
    wanted = _state(state)
    keys = conn.keys(queue)
    if wanted is JobState.PENDING:
        return _pending_page(conn, keys, start, count, newest_first)
    return _page(conn, _set_of(keys, wanted), start, count, newest_first)


def search_page(conn: Connection, queue: str, state: str, ids: list[str], *,
                name: str = "", needle: str = "", escaped: str = "",
                time_field: str = "", since: int | None = None, until: int | None = None,
                most: int = 50, payload_chars: int | None = 0
                ) -> tuple[int, list[dict[str, str | None]]]:
    """Filter one page of ``state``'s ids (from :func:`page_ids`) on the server, in one
    call (``search_page-1.lua``): (ids examined, the matches' fields). It stops at the
    ``most``-th match; the caller's next page starts after the ids examined. Each match
    carries its payload cut to ``payload_chars`` characters (None: whole; 0: none)."""
    if len(ids) > MAX_PAGE:
        raise InvalidArgument(f"a search page is at most {MAX_PAGE} ids, got {len(ids)}")
    if time_field not in ("", "created_at", "finished_at"):
        raise InvalidArgument(f"time_field must be created_at or finished_at, not {time_field!r}")
    validate.positive_int(most, "most")
    if payload_chars is not None:
        validate.non_negative_int(payload_chars, "payload_chars")
    keys = conn.keys(queue)
    wanted = _state(state)
    home = keys.pending if wanted is JobState.PENDING else _set_of(keys, wanted)
    if not ids:
        return 0, []
    call = search_page_call(keys, home, ids, name=name, needle=needle, escaped=escaped,
                            time_field=time_field, since=since, until=until, most=most,
                            payload_chars=payload_chars)
    return search_page_reply(conn.executor.run(*call))


def _set_of(keys: Keys, state: JobState) -> str:
    return {
        JobState.SCHEDULED: keys.scheduled, JobState.ACTIVE: keys.active,
        JobState.COMPLETED: keys.completed, JobState.DEAD: keys.dead,
        JobState.WAITING: keys.waiting,
    }[state]


def _page(conn: Connection, key: str, start: int, count: int, newest_first: bool) -> list[str]:
    stop = start + count - 1
    ids: Any = (conn.redis.zrevrange(key, start, stop) if newest_first
                else conn.redis.zrange(key, start, stop))
    return [str(i) for i in ids]


def _pending_page(conn: Connection, keys: Keys, start: int, count: int,
                  newest_first: bool) -> list[str]:
    """A page across the pending set and then every group's lane (by group name)."""
    pipe = conn.redis.pipeline(transaction=False)
    pipe.zcard(keys.pending)
    pipe.smembers(keys.groups)
    size, groups = pipe.execute()
    parts = [(keys.pending, int(size))]
    if groups:
        names = sorted(str(g) for g in groups)
        pipe = conn.redis.pipeline(transaction=False)
        for group in names:
            pipe.zcard(keys.lane(group))
        parts += [(keys.lane(g), int(n)) for g, n in zip(names, pipe.execute(), strict=True)]
    ids: list[str] = []
    for key, n in parts:
        if start >= n:
            start -= n
            continue
        ids += _page(conn, key, start, min(count - len(ids), n - start), newest_first)
        start = 0
        if len(ids) >= count:
            break
    return ids
