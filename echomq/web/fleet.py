"""The dashboard's Workers and Schedules: who is working (the workers' heartbeat records,
:mod:`echomq.queue.workers`) and what runs on a clock (every queue's cron schedules, with
pause, resume and delete as POSTs behind the CSRF token, refused in read-only mode)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from starlette.requests import Request
from starlette.responses import Response

import echomq
from echomq.queue.workers import held_states
from echomq.web import reads
from echomq.web.actions import _act
from echomq.web.urls import named, route_path

if TYPE_CHECKING:
    from echomq.web.app import Dashboard

GONE_HELD_READ = 20
"""Gone workers whose held jobs are read (what became of each: one pipelined read) on one
page."""
MAX_CRON_QUEUES = 200
"""Queues with schedules one Schedules page reads (each costs one round trip)."""


def _workers_context(board: Dashboard, query: Any) -> dict[str, Any]:
    """Every worker that beat lately (``queue`` filters); for a gone one, what became of
    the jobs it held, read now (still under its claim, or recovered)."""
    conn = board.conn
    wanted = query.get("queue") or None
    if wanted is not None:
        conn.keys(wanted)
    found = echomq.workers(conn, wanted)
    gone = [w for w in found if not w.alive and w.held][:GONE_HELD_READ]
    states = iter(held_states(conn, tuple(h for w in gone for h in w.held)))  # one trip
    rows = []
    for w in found:
        held: list[dict[str, Any]] = [{"queue": h.queue, "id": h.id, "state": None,
                                       "held": True} for h in w.held]
        if w in gone:
            held = [next(states) for _ in w.held]
        rows.append({"w": w, "held": held})
    return {"rows": rows, "queue": wanted or "",
            "alive": sum(1 for w in found if w.alive), "gone": sum(1 for w in found
                                                                   if not w.alive)}


async def workers(board: Dashboard, request: Request) -> Response:
    context = await board.call(_workers_context, board, request.query_params)
    return board.render(request, "workers.html", **context)


async def workers_rows(board: Dashboard, request: Request) -> Response:
    context = await board.call(_workers_context, board, request.query_params)
    return board.render(request, "_workers_rows.html", **context)


def _schedules_context(board: Dashboard) -> dict[str, Any]:
    """Every schedule of every queue in the prefix's cron set, with the state of the jobs
    of its latest fires (one pipelined read)."""
    conn = board.conn
    queues = sorted(cast(set[str], conn.redis.smembers(conn.cron_set)))
    shown = queues[:MAX_CRON_QUEUES]
    rows: list[dict[str, Any]] = []
    for queue in shown:
        try:
            found = echomq.schedules(conn, queue)
        except echomq.EchoMQError:  # a name the key builder refuses: not ours to show
            continue
        rows += [{"queue": queue, "s": s} for s in found]
    pipe = conn.redis.pipeline(transaction=False)
    for row in rows:
        for job_id in row["s"].recent_job_ids:
            pipe.hget(conn.keys(row["queue"]).job(job_id), "state")
    states = iter(pipe.execute() if rows else [])
    for row in rows:
        row["recent"] = [(job_id, next(states) or "gone") for job_id in row["s"].recent_job_ids]
    return {"rows": rows, "now": reads.server_ms(conn), "queues": len(queues),
            "more": len(queues) > len(shown)}


async def schedules(board: Dashboard, request: Request) -> Response:
    context = await board.call(_schedules_context, board)
    return board.render(request, "schedules.html", **context)


SCHEDULE_ACTIONS = ("pause", "resume", "delete")


async def schedule_action(board: Dashboard, request: Request) -> Response:
    """Pause, resume or delete one schedule (queue and name in the form)."""
    action = request.path_params["action"]
    if board.read_only:
        return Response("the dashboard is read-only", status_code=403, media_type="text/plain")
    if action not in SCHEDULE_ACTIONS:
        return Response(f"unknown action {action!r}", status_code=404,
                        media_type="text/plain")
    form = await request.form()
    queue, name = named(request, "queue", form), named(request, "name", form)
    board.conn.keys(queue)
    conn = board.conn

    def run() -> str:
        if action == "pause":
            done = echomq.pause_schedule(conn, queue, name)
            return f"paused schedule {name} of {queue}" if done else \
                f"schedule {name} of {queue} was paused already"
        if action == "resume":
            done = echomq.resume_schedule(conn, queue, name)
            return f"resumed schedule {name} of {queue}" if done else \
                f"schedule {name} of {queue} was not paused"
        existed = echomq.unschedule(conn, queue, name)
        return f"deleted schedule {name} of {queue}" if existed else \
            f"no schedule {name} in {queue}: nothing deleted"

    return await _act(board, request, run, route_path(request, "schedules"))

