"""The dashboard's pages (GET): overview, a queue's jobs, one job, the archive, login."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

import echomq
from echomq.errors import EchoMQError, InvalidArgument
from echomq.records import Job
from echomq.web import charts, reads
from echomq.web.archive_actions import archived_entry
from echomq.web.timing import timing
from echomq.web.urls import named

if TYPE_CHECKING:
    from echomq.web.app import Dashboard

PER_PAGE = 50
OVERVIEW_PER_PAGE = 50
"""Queues on one page of the overview (each costs a few reads on every poll)."""
MAX_PAGE = 100_000
MAX_FILTER = 200
HISTORY_PER_PAGE = 50
"""Archived outcomes on one page of a job."""
AUDIT_LIMIT = 200
_DIGITS = re.compile(r"[0-9]{1,9}")
_TIME = re.compile(r"-?[0-9]{1,15}|[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9:.,]{2,20})?"
                   r"(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)?", re.ASCII)


def _number(value: str | None, default: int, most: int) -> int:
    """A page number from the query: ASCII digits only (``int`` takes ``٣``), at most
    ``most``; anything else is ``default``."""
    if value is None or not _DIGITS.fullmatch(value):
        return default
    return min(int(value), most)


def _overview_context(board: Dashboard, query: Mapping[str, str]) -> dict[str, Any]:
    """One page of the queue list (``q`` filters names), each with its summary: a poll
    costs ``OVERVIEW_PER_PAGE`` summaries however many queues the prefix holds."""
    conn = board.conn
    wanted = query.get("q", "")[:MAX_FILTER]
    names = board.queues.names()
    if wanted:
        names = [n for n in names if wanted in n]
    pages = max(1, -(-len(names) // OVERVIEW_PER_PAGE))
    page = min(_number(query.get("page"), 0, MAX_PAGE), pages - 1)
    shown = names[page * OVERVIEW_PER_PAGE:(page + 1) * OVERVIEW_PER_PAGE]
    declared = (conn.redis.smismember(conn.declared_set, shown) if shown else [])
    now = reads.server_ms(conn)
    rows = [reads.summary(conn, q, now, bool(d)) for q, d in zip(shown, declared, strict=True)]
    return {"rows": rows, "page": page, "pages": pages, "total": len(names), "q": wanted,
            "first": page * OVERVIEW_PER_PAGE, "skipped": board.queues.skipped}


async def overview(board: Dashboard, request: Request) -> Response:
    span = charts.span_of(request)
    context = await board.call(_overview_context, board, request.query_params)
    shown = [row.name for row in context["rows"]]
    context.update(await board.call(charts.context, board, shown, span,
                                    f"{len(shown)} queue(s)"), queue=None)
    return board.render(request, "overview.html", **context)


def page_number(value: str | None) -> int:
    """A page number from the query (0 when absent or not digits)."""
    return _number(value, 0, MAX_PAGE)


def overview_queues(board: Dashboard, query: Mapping[str, str]) -> list[str]:
    """The names one page of the overview lists (its charts sum these queues)."""
    wanted = query.get("q", "")[:MAX_FILTER]
    names = [n for n in board.queues.names() if wanted in n]
    pages = max(1, -(-len(names) // OVERVIEW_PER_PAGE))
    page = min(_number(query.get("page"), 0, MAX_PAGE), pages - 1)
    return names[page * OVERVIEW_PER_PAGE:(page + 1) * OVERVIEW_PER_PAGE]


async def overview_rows(board: Dashboard, request: Request) -> Response:
    context = await board.call(_overview_context, board, request.query_params)
    return board.render(request, "_overview_rows.html", **context)


def _paging(request: Request) -> tuple[str | None, int]:
    """The state asked for (None: the page picks the first that holds jobs) and the page."""
    state = request.query_params.get("state")
    if state is not None and state not in reads.STATES:
        raise InvalidArgument(f"state must be one of {', '.join(reads.STATES)}")
    return state, _number(request.query_params.get("page"), 0, MAX_PAGE)


def _queue_context(board: Dashboard, queue: str, wanted: str | None, page: int
                   ) -> dict[str, Any]:
    """One page of a state's jobs with their times; ``known`` is False for a name nothing
    of which exists (a 404, not an empty queue)."""
    conn = board.conn
    found = echomq.counts(conn, queue)
    counts = {name: int(getattr(found, name)) for name in reads.STATES}
    if not any(counts.values()) and not reads.known(conn, queue):
        return {"queue": queue, "known": False}
    state = wanted or reads.opening_state(counts)
    jobs = reads.job_page(conn, queue, state, page, PER_PAGE)
    now = reads.server_ms(conn)
    scores = reads.scores(conn, queue, state, [j.id for j in jobs])
    return {"queue": queue, "known": True, "state": state, "page": page, "counts": counts,
            "jobs": [(j, timing(j, s, now)) for j, s in zip(jobs, scores, strict=True)],
            "now_ms": now, "paused": found.paused,
            "pages": max(1, -(-counts[state] // PER_PAGE)), "per_page": PER_PAGE}


async def queue(board: Dashboard, request: Request) -> Response:
    state, page = _paging(request)
    span = charts.span_of(request)
    context = await board.call(_queue_context, board, named(request, "queue"), state, page)
    if not context["known"]:
        return board.render(request, "no_queue.html", status=404, **context)
    context.update(await board.call(charts.context, board, [context["queue"]], span,
                                    context["queue"]))
    return board.render(request, "queue.html", **context)


async def queue_jobs(board: Dashboard, request: Request) -> Response:
    state, page = _paging(request)
    context = await board.call(_queue_context, board, named(request, "queue"), state, page)
    if not context["known"]:
        return PlainTextResponse(f"no queue named {context['queue']!r}", status_code=404)
    return board.render(request, "_jobs.html", **context)


def _job_context(board: Dashboard, queue: str, job_id: str, outcomes: int
                 ) -> dict[str, Any]:
    """The job's row, and one page of its archived outcomes (oldest first): a job run
    20,000 times shows ``HISTORY_PER_PAGE`` of them, with a link to the next page."""
    job: Job | None = echomq.get_job(board.conn, queue, job_id)
    start = outcomes * HISTORY_PER_PAGE
    floor = board.floor
    history = (floor.history(queue, job_id, offset=start, limit=HISTORY_PER_PAGE + 1)
               if floor is not None else [])
    last = None
    if floor is not None:
        from echomq.archive.floor_notes import last_outcome

        last = last_outcome(floor, queue, job_id)
    now = reads.server_ms(board.conn)
    score = reads.scores(board.conn, queue, job.state.value, [job_id])[0] if job else None
    return {"queue": queue, "job_id": job_id, "job": job, "now_ms": now,
            "timing": timing(job, score, now) if job else None,
            "history": [archived_entry(e) for e in history[:HISTORY_PER_PAGE]],
            "replayable": last is not None and last.payload is not None,
            "outcomes": outcomes, "more_outcomes": len(history) > HISTORY_PER_PAGE,
            "history_start": start,
            "payload": reads.pretty(job.payload) if job else None,
            "result": _result(job),
            "progress": reads.pretty(job.progress) if job and job.progress is not None
            else None}


def _result(job: Job | None) -> str | None:
    """A completed job's result as indented JSON (``null`` included: it is what the handler
    returned); None for a job not completed and for a cancelled one (its reason shows)."""
    if job is None or job.state != "completed" or job.cancelled:
        return None
    return reads.pretty_value(job.result)


async def job(board: Dashboard, request: Request) -> Response:
    queue, job_id = named(request, "queue"), named(request, "job")
    board.conn.keys(queue).job(job_id)
    outcomes = _number(request.query_params.get("outcomes"), 0, MAX_PAGE)
    context = await board.call(_job_context, board, queue, job_id, outcomes)
    status = 404 if context["job"] is None and not context["history"] and not outcomes \
        else 200
    return board.render(request, "job.html", status=status, **context)


def _ms(value: str | None, what: str) -> int | None:
    """A form's time: ms since the epoch or an ISO 8601 time (naive means UTC).

    ASCII only, checked by a pattern first: ``int`` and ``fromisoformat`` take other
    scripts' digits (``٣``), and a number past any date overflowed into a 500."""
    from echomq.archive.entries import parse_time

    if not value:
        return None
    if not _TIME.fullmatch(value):
        raise InvalidArgument(f"{what}: {value[:40]!r} is neither ms nor an ISO 8601 time "
                              "(ms: up to 15 ASCII digits; ISO: 2025-01-31T12:00:00Z)")
    try:
        return parse_time(value, what)
    except (ValueError, OverflowError, OSError) as exc:
        if isinstance(exc, InvalidArgument):
            raise
        raise InvalidArgument(f"{what}: {value!r} is not a time ({exc})") from exc


def _archive_context(board: Dashboard, query: dict[str, str]) -> dict[str, Any]:
    from echomq.web import archive_view

    assert board.floor is not None
    conn = board.conn
    wanted = query.get("q", "")[:MAX_FILTER]
    names = archive_view.archive_names(conn, board.floor)
    if wanted:
        names = [n for n in names if wanted in n]
    pages = max(1, -(-len(names) // OVERVIEW_PER_PAGE))
    page = min(_number(query.get("page"), 0, MAX_PAGE), pages - 1)
    now = reads.server_ms(conn)
    rows = archive_view.archive_rows(
        conn, board.floor, now,
        names[page * OVERVIEW_PER_PAGE:(page + 1) * OVERVIEW_PER_PAGE])
    found: list[dict[str, Any]] | None = None
    error = None
    if query.get("queue"):
        try:
            outcome = query.get("outcome") or None
            if outcome is not None and outcome not in ("completed", "cancelled", "dead"):
                raise InvalidArgument(f"unknown outcome {outcome!r}")
            conn.keys(query["queue"])  # the name is checked before the floor is read
            found = archive_view.audit(
                board.floor, query["queue"], outcome=outcome,
                since=_ms(query.get("since"), "since"), until=_ms(query.get("until"), "until"),
                job_id=query.get("job") or None, limit=AUDIT_LIMIT)
        except EchoMQError as exc:
            error = str(exc)
    return {"rows": rows, "found": found, "error": error, "query": query,
            "limit": AUDIT_LIMIT, "page": page, "pages": pages, "total": len(names),
            "first": page * OVERVIEW_PER_PAGE, "q": wanted, "now_ms": now}


async def archive(board: Dashboard, request: Request) -> Response:
    if board.floor is None:
        return board.render(request, "archive.html", status=404, rows=[], found=None,
                            error="no floor: start the dashboard with --floor PATH",
                            query={}, limit=AUDIT_LIMIT, page=0, pages=1, total=0, first=0,
                            q="")
    context = await board.call(_archive_context, board, dict(request.query_params))
    return board.render(request, "archive.html", status=400 if context["error"] else 200,
                        **context)


async def login_form(board: Dashboard, request: Request) -> Response:
    return board.render(request, "login.html", failed=False)


async def metrics(board: Dashboard, request: Request) -> Response:
    """Prometheus text, computed at scrape time by ``echomq.prometheus`` (loaded on use)."""
    try:
        from echomq.prometheus import render
    except ImportError:
        return PlainTextResponse("metrics are not available in this build", status_code=501)
    body, content_type = await board.call(render, board.conn, board.floor)
    return Response(body, media_type=content_type)
