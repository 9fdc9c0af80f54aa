"""The archive's powers in the browser: an archived outcome as a job page shows it, and
Replay (POST), which enqueues the job's recorded payload again (``archive.replay``).

Replay is an action like the others: refused in read-only mode, then the CSRF token, then
it runs; it answers with the new job's page, whose row names its origin (``replay_of``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from echomq.errors import EchoMQError
from echomq.web.actions import _redirect
from echomq.web.reads import pretty
from echomq.web.security import csrf_ok
from echomq.web.urls import job_path, named

if TYPE_CHECKING:
    from echomq.archive.entries import ArchivedEntry
    from echomq.web.app import Dashboard


def archived_entry(entry: ArchivedEntry) -> dict[str, Any]:
    """One archived outcome for a template: its fields, errors and log lines decoded, the
    payload as indented JSON (None when its queue did not record payloads), the run time."""
    run = entry.at - entry.started_at if entry.started_at else None
    return {**entry.to_dict(), "errors": entry.errors_value, "logs": entry.logs_value,
            "payload": None if entry.payload is None else pretty(entry.payload),
            "name": entry.name,
            "duration_ms": run}


async def replay(board: Dashboard, request: Request) -> Response:
    """Enqueue an archived job's payload again, on its queue or ``to_queue``; go to the
    new job's page (a refusal goes back to the archived job's page, saying why)."""
    if board.read_only:
        return PlainTextResponse("the dashboard is read-only", status_code=403)
    form = await request.form()
    if not csrf_ok(request, form):
        return PlainTextResponse("missing or wrong CSRF token", status_code=403)
    if board.floor is None:
        return PlainTextResponse("no floor: start the dashboard with --floor PATH",
                                 status_code=404)
    queue, job_id = named(request, "queue", form), named(request, "job", form)
    target = str(form.get("to_queue") or "").strip() or queue
    board.conn.keys(queue).job(job_id)
    floor = board.floor

    def run() -> str:
        from echomq.archive.replay import replay as enqueue_again

        return enqueue_again(board.conn, floor, queue, job_id, to_queue=target)

    try:
        new_id = await board.call(run)
    except EchoMQError as exc:
        return _redirect(job_path(request, queue, job_id),
                         f"refused: {type(exc).__name__}: {exc}")
    return _redirect(job_path(request, target, new_id),
                     f"replayed {job_id} of {queue} as {new_id} in {target}")
