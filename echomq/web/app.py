"""``create_app``: the dashboard as one Starlette application, to serve or to mount.

Pages read Redis through bounded ranges (:mod:`echomq.web.reads`) and the archive floor
(:mod:`echomq.web.archive_view`); actions are POSTs gated by the CSRF token and refused
in read-only mode (:mod:`echomq.web.security`). Redis and LMDB calls block, so handlers
run them in Starlette's thread pool.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from echomq.errors import EchoMQError, InvalidArgument, InvalidKey
from echomq.queue.connection import Connection
from echomq.web import actions, archive_actions, charts, fleet, pages, search_pages, timing
from echomq.web.discovery import QueueDirectory
from echomq.web.hosts import HostCheck, allowed_names
from echomq.web.security import Gate
from echomq.web.sessions import SESSION_TTL_S, Sessions
from echomq.web.urls import job_path, queue_path, with_query

if TYPE_CHECKING:
    from echomq.archive.floor import Floor

POLL_S = 2
"""How often a page's live parts refresh (at most one Redis read per second per viewer)."""


class Dashboard:
    """What every handler shares: the connection, the floor, the settings, the templates."""

    def __init__(self, conn: Connection, floor: Floor | None, token: str | None,
                 read_only: bool, sessions: Sessions) -> None:
        self.conn = conn
        self.floor = floor
        self.token = token
        self.read_only = read_only
        self.sessions = sessions
        self.queues = QueueDirectory(conn)
        env = jinja2.Environment(loader=jinja2.PackageLoader("echomq.web", "templates"),
                                 autoescape=True, undefined=jinja2.StrictUndefined)
        env.filters["when"] = _when
        env.filters["age"] = _age
        env.filters["ago"] = timing.when_tag
        env.filters["span"] = timing.span
        env.filters["iso"] = timing.iso
        env.globals["poll_s"] = POLL_S
        env.globals["url_for"] = _url_for
        env.globals["job_url"] = _job_url
        env.globals["queue_url"] = _queue_url
        env.globals["with_query"] = with_query
        self.templates = Jinja2Templates(env=env)

    def render(self, request: Request, name: str, status: int = 200, **context: Any
               ) -> Response:
        context.setdefault("message", request.query_params.get("done"))
        context.update(read_only=self.read_only, csrf=request.state.csrf,
                       login=self.token is not None, has_floor=self.floor is not None)
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(fn, *args, **kwargs)


@jinja2.pass_context
def _url_for(context: dict[str, Any], name: str, /, **params: Any) -> str:
    """A route's path (under the mount point): links stay relative to the host."""
    return str(context["request"].url_for(name, **params).path)


@jinja2.pass_context
def _job_url(context: dict[str, Any], queue: str, job_id: str) -> str:
    """A job's page: the queue and the id in the query string (:mod:`echomq.web.urls`)."""
    return job_path(context["request"], queue, job_id)


@jinja2.pass_context
def _queue_url(context: dict[str, Any], queue: str, **params: Any) -> str:
    """A queue's page: the name in the query string, with ``state``, ``page``."""
    return queue_path(context["request"], queue, **params)


def _when(ms: int | str | None) -> str:
    """Milliseconds since the epoch as UTC text."""
    if ms in (None, ""):
        return "-"
    try:  # an archived entry's time is what its writer put there
        stamp = datetime.fromtimestamp(int(ms) / 1000, tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return "-"
    return stamp.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _age(ms: int | None) -> str:
    """A duration in ms as a short human text."""
    if ms is None:
        return "-"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _open_floor(floor: Floor | str | os.PathLike[str] | None) -> Floor | None:
    if floor is None:
        return None
    from echomq.archive.floor import Floor

    return floor if isinstance(floor, Floor) else Floor(floor)


def create_app(conn: Connection, *, floor: Floor | str | os.PathLike[str] | None = None,
               token: str | None = None, read_only: bool = False,
               session_ttl_s: float = SESSION_TTL_S,
               allowed_hosts: Iterable[str] | None = None) -> Starlette:
    """The dashboard for ``conn``'s prefix, as a Starlette app (mount it anywhere).

    ``floor`` (a Floor or its directory) shows the archive and finds jobs Redis forgot;
    ``token`` makes every request need it (login form or bearer header); a login lasts
    ``session_ttl_s`` seconds at most; ``read_only`` hides and refuses every action.
    Sessions live in this process (``app.state.sessions``): a restart logs everyone out.
    A request's ``Host`` must name the address it came in on (or a loopback name, on
    loopback) or one of ``allowed_hosts`` (``"*"``: any), else 400: no DNS rebinding
    (:mod:`echomq.web.hosts`).
    """
    hosts = allowed_names(allowed_hosts)
    if token is not None and not token.strip():
        raise EchoMQError("the dashboard token must not be empty")
    if not session_ttl_s >= 1:
        raise EchoMQError(f"a session must last 1 s or more, not {session_ttl_s!r} s")
    sessions = Sessions(session_ttl_s)
    board = Dashboard(conn, _open_floor(floor), token, read_only, sessions)

    def bind(handler: Callable[[Dashboard, Request], Awaitable[Response]]
             ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(board, request)
            except (InvalidKey, InvalidArgument) as exc:
                return PlainTextResponse(str(exc), status_code=400)
        return endpoint

    routes = [
        Route("/", bind(pages.overview), name="overview"),
        Route("/fragments/overview", bind(pages.overview_rows), name="overview_rows"),
        # a queue name and a job id travel in the query string or the form, never in
        # the path (a browser resolves ".." segments: :mod:`echomq.web.urls`)
        Route("/queue", bind(pages.queue), name="queue"),
        Route("/queue/jobs", bind(pages.queue_jobs), name="queue_jobs"),
        Route("/job", bind(pages.job), name="job"),
        Route("/archive", bind(pages.archive), name="archive"),
        Route("/search", bind(search_pages.search), name="search"),
        Route("/search/results", bind(search_pages.results), name="search_results"),
        Route("/search/sql", bind(search_pages.sql), methods=["POST"], name="search_sql"),
        Route("/fragments/charts", bind(charts.fragment), name="charts"),
        Route("/login", bind(pages.login_form), name="login"),
        Route("/login", bind(actions.login), methods=["POST"], name="login_post"),
        Route("/logout", bind(actions.logout), methods=["POST"], name="logout"),
        Route("/queue/pause", bind(actions.pause), methods=["POST"], name="pause"),
        Route("/queue/resume", bind(actions.resume), methods=["POST"], name="resume"),
        Route("/queue/dead", bind(actions.dead), methods=["POST"], name="dead"),
        Route("/job/{action}", bind(actions.job), methods=["POST"], name="job_action"),
        Route("/archive/replay", bind(archive_actions.replay), methods=["POST"],
              name="replay"),
        # the path forms of earlier versions, for scripts and bookmarks; no page links
        # to them
        Route("/queues/{queue}", bind(pages.queue)),
        Route("/queues/{queue}/fragment", bind(pages.queue_jobs)),
        Route("/queues/{queue}/jobs/{job_id:path}", bind(pages.job)),
        Route("/queues/{queue}/pause", bind(actions.pause), methods=["POST"]),
        Route("/queues/{queue}/resume", bind(actions.resume), methods=["POST"]),
        Route("/queues/{queue}/dead", bind(actions.dead), methods=["POST"]),
        Route("/queues/{queue}/jobs/{job_id:path}/{action}", bind(actions.job),
              methods=["POST"]),
        Route("/metrics", bind(pages.metrics), name="metrics"),
        Route("/workers", bind(fleet.workers), name="workers"),
        Route("/fragments/workers", bind(fleet.workers_rows), name="workers_rows"),
        Route("/schedules", bind(fleet.schedules), name="schedules"),
        Route("/schedules/{action}", bind(fleet.schedule_action), methods=["POST"],
              name="schedule_action"),
        Mount("/static", StaticFiles(packages=[("echomq.web", "static")]), name="static"),
    ]
    app = Starlette(routes=routes,
                    middleware=[Middleware(HostCheck, allowed=hosts),
                                Middleware(Gate, token=token, sessions=sessions)])
    app.state.sessions = sessions
    return app

