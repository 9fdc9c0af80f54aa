"""The dashboard's actions (POST): each checks read-only, then the CSRF token, then acts
and redirects back (303) with what it did."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

import echomq
from echomq import cancel
from echomq.errors import EchoMQError
from echomq.web.security import SESSION_COOKIE, cookie_path, csrf_ok, set_session
from echomq.web.urls import job_path, named, queue_path

if TYPE_CHECKING:
    from echomq.web.app import Dashboard


MAX_SELECTED = 1000


def _next(request: Request, form: Any, fallback: str) -> str:
    """Where to go back to: the form's ``next`` when it is a path of this site."""
    target = str(form.get("next") or "")
    parts = urlsplit(target)
    if not target.startswith("/") or target.startswith("//") or parts.scheme or parts.netloc:
        return fallback
    return target


def _redirect(target: str, message: str) -> RedirectResponse:
    parts = urlsplit(target)
    query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("done="))
    query = (query + "&" if query else "") + urlencode({"done": message})
    return RedirectResponse(f"{parts.path}?{query}", status_code=303)


async def _act(board: Dashboard, request: Request,
               fn: Callable[[], str], fallback: str) -> Response:
    """The one path of every action: refuse, check, run, go back."""
    if board.read_only:
        return PlainTextResponse("the dashboard is read-only", status_code=403)
    form = await request.form()
    if not csrf_ok(request, form):
        return PlainTextResponse("missing or wrong CSRF token", status_code=403)
    try:
        message = await board.call(fn)
    except EchoMQError as exc:
        message = f"refused: {type(exc).__name__}: {exc}"
    return _redirect(_next(request, form, fallback), message)


def _queue_url(request: Request, queue: str, state: str = "pending") -> str:
    return queue_path(request, queue, state=state)


async def _queue_of(board: Dashboard, request: Request) -> str:
    """The queue an action names (form field ``queue``, or the earlier path form), checked."""
    queue = named(request, "queue", await request.form())
    board.conn.keys(queue)
    return queue


async def pause(board: Dashboard, request: Request) -> Response:
    queue = await _queue_of(board, request)

    def run() -> str:
        echomq.pause(board.conn, queue)
        return f"paused {queue}"

    return await _act(board, request, run, _queue_url(request, queue))


async def resume(board: Dashboard, request: Request) -> Response:
    queue = await _queue_of(board, request)

    def run() -> str:
        echomq.resume(board.conn, queue)
        return f"resumed {queue}"

    return await _act(board, request, run, _queue_url(request, queue))


async def dead(board: Dashboard, request: Request) -> Response:
    """Retry or remove dead letters: the selected ids, or all of them."""
    if board.read_only:
        return PlainTextResponse("the dashboard is read-only", status_code=403)
    queue = await _queue_of(board, request)
    form = await request.form()
    what = str(form.get("op") or "")
    every = form.get("scope") == "all"
    ids = [str(i) for i in form.getlist("ids")][:MAX_SELECTED]

    def run() -> str:
        if not every and not ids:
            return "nothing selected"
        if what == "retry":
            n = echomq.retry_dead(board.conn, queue, None if every else ids)
            return f"retried {n} dead job(s) in {queue}"
        if what == "remove":
            if every:
                n = echomq.purge(board.conn, queue, "dead")
                return f"removed {n} dead job(s) in {queue}"
            refused: list[str] = []
            for job_id in ids:
                try:
                    echomq.remove_job(board.conn, queue, job_id)
                except EchoMQError as exc:  # the others still go; the first reason is said
                    refused.append(f"{job_id}: {type(exc).__name__}: {exc}")
            done = f"removed {len(ids) - len(refused)} dead job(s) in {queue}"
            return done + (f"; refused {len(refused)} ({refused[0]})" if refused else "")
        return f"unknown operation {what!r}"

    return await _act(board, request, run, _queue_url(request, queue, "dead"))


JOB_ACTIONS = ("retry", "remove", "cancel", "promote")


async def job(board: Dashboard, request: Request) -> Response:
    """One job: retry (dead), remove (finished or waiting), cancel (running), promote.

    The queue and the id come from the form (or the earlier path form); the message
    names both, so what was acted on is never in doubt."""
    action = request.path_params["action"]
    if action not in JOB_ACTIONS:
        return PlainTextResponse(f"unknown action {action!r}", status_code=404)
    form = await request.form()
    queue, job_id = named(request, "queue", form), named(request, "job", form)
    board.conn.keys(queue).job(job_id)

    def run() -> str:
        if action == "retry":
            n = echomq.retry_dead(board.conn, queue, [job_id])
            return (f"retried {job_id} in {queue}" if n
                    else f"{job_id} in {queue} is not dead: nothing retried")
        if action == "remove":
            echomq.remove_job(board.conn, queue, job_id)
            return f"removed {job_id} in {queue}"
        if action == "cancel":
            said = cancel.request(board.conn, queue, job_id, "dashboard")
            return f"cancel {job_id} in {queue}: {said}"
        echomq.promote(board.conn, queue, job_id)
        return f"promoted {job_id} in {queue}"

    fallback = job_path(request, queue, job_id)
    return await _act(board, request, run, fallback)


async def login(board: Dashboard, request: Request) -> Response:
    """Check the token once and start a new session (its own cookie, HttpOnly,
    SameSite=Strict); a session the browser held before is logged out."""
    home = str(request.url_for("overview").path)
    if board.token is None:
        return RedirectResponse(home, status_code=303)
    form = await request.form()
    given = str(form.get("token") or "")
    if not hmac.compare_digest(given.encode(), board.token.encode()):
        return board.render(request, "login.html", status=401, failed=True)
    board.sessions.revoke(request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse(home, status_code=303)
    set_session(response, request, board.sessions)
    return response


async def logout(board: Dashboard, request: Request) -> Response:
    """End the session on the server too: a copy of its cookie stops working."""
    form = await request.form()
    if not csrf_ok(request, form):
        return PlainTextResponse("missing or wrong CSRF token", status_code=403)
    board.sessions.revoke(request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse(str(request.url_for("login").path), status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=cookie_path(request))
    return response
