"""The dashboard's pages (GET): overview, a queue's jobs, one job, the archive, login."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

import echomq
from echomq.errors import EchoMQError, InvalidArgument
from echomq.models import Job
from echomq.web import reads
from echomq.web.urls import named

if TYPE_CHECKING:
    from echomq.web.app import Dashboard

PER_PAGE = 50
MAX_PAGE = 100_000
AUDIT_LIMIT = 200


def _summaries(board: Dashboard) -> list[reads.QueueSummary]:
    conn = board.conn
    names = board.queues.names()
    declared = {str(q) for q in conn.redis.smembers(conn.declared_set)}
    now = reads.server_ms(conn)
    return [reads.summary(conn, q, now, q in declared) for q in names]


async def overview(board: Dashboard, request: Request) -> Response:
    rows = await board.call(_summaries, board)
    return board.render(request, "overview.html", rows=rows)


async def overview_rows(board: Dashboard, request: Request) -> Response:
    rows = await board.call(_summaries, board)
    return board.render(request, "_overview_rows.html", rows=rows)


def _paging(request: Request) -> tuple[str, int]:
    state = request.query_params.get("state", "pending")
    if state not in reads.STATES:
        raise InvalidArgument(f"state must be one of {', '.join(reads.STATES)}")
    try:
        page = int(request.query_params.get("page", "0"))
    except ValueError:
        page = 0
    return state, min(max(page, 0), MAX_PAGE)


def _queue_context(board: Dashboard, queue: str, state: str, page: int) -> dict[str, Any]:
    conn = board.conn
    found = echomq.counts(conn, queue)
    counts = {name: int(getattr(found, name)) for name in reads.STATES}
    jobs = reads.job_page(conn, queue, state, page, PER_PAGE)
    return {"queue": queue, "state": state, "page": page, "counts": counts, "jobs": jobs,
            "paused": found.paused,
            "pages": max(1, -(-counts[state] // PER_PAGE)), "per_page": PER_PAGE}


async def queue(board: Dashboard, request: Request) -> Response:
    state, page = _paging(request)
    context = await board.call(_queue_context, board, named(request, "queue"), state, page)
    return board.render(request, "queue.html", **context)


async def queue_jobs(board: Dashboard, request: Request) -> Response:
    state, page = _paging(request)
    context = await board.call(_queue_context, board, named(request, "queue"), state, page)
    return board.render(request, "_jobs.html", **context)


def _job_context(board: Dashboard, queue: str, job_id: str) -> dict[str, Any]:
    job: Job | None = echomq.get_job(board.conn, queue, job_id)
    history = board.floor.history(queue, job_id) if board.floor is not None else []
    return {"queue": queue, "job_id": job_id, "job": job,
            "history": [e.to_dict() for e in history],
            "payload": reads.pretty(job.payload) if job else None,
            "result": reads.pretty(job.result) if job and job.result is not None else None,
            "progress": reads.pretty(job.progress) if job and job.progress is not None
            else None}


async def job(board: Dashboard, request: Request) -> Response:
    queue, job_id = named(request, "queue"), named(request, "job")
    board.conn.keys(queue).job(job_id)
    context = await board.call(_job_context, board, queue, job_id)
    status = 404 if context["job"] is None and not context["history"] else 200
    return board.render(request, "job.html", status=status, **context)


def _ms(value: str | None, what: str) -> int | None:
    """A form's time: ms since the epoch or an ISO 8601 time (naive means UTC)."""
    from echomq.archive.entries import parse_time

    return parse_time(value, what)


def _archive_context(board: Dashboard, query: dict[str, str]) -> dict[str, Any]:
    from echomq.web import archive_view

    assert board.floor is not None
    conn = board.conn
    rows = archive_view.archive_rows(conn, board.floor, reads.server_ms(conn))
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
            "limit": AUDIT_LIMIT}


async def archive(board: Dashboard, request: Request) -> Response:
    if board.floor is None:
        return board.render(request, "archive.html", status=404, rows=[], found=None,
                            error="no floor: start the dashboard with --floor PATH",
                            query={}, limit=AUDIT_LIMIT)
    context = await board.call(_archive_context, board, dict(request.query_params))
    return board.render(request, "archive.html", **context)


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
