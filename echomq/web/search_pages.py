"""The search page: one form over live jobs (:mod:`echomq.web.search_live`) or the
archive floor (:mod:`echomq.web.search_archive`), and the SQL box over the floor
(:mod:`echomq.web.sql_box`). GETs render the whole page or, for htmx, the results
alone; the SQL box is a POST with the CSRF token, offered only behind a token and never
in read-only mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from echomq.errors import EchoMQError, InvalidArgument
from echomq.web import pages, reads, search_archive, search_live, sql_box
from echomq.web.security import csrf_ok

if TYPE_CHECKING:
    from echomq.web.app import Dashboard

FIELDS = ("where", "queue", "id", "name", "state", "outcome", "time_of", "since", "until",
          "payload", "match", "start", "cursor")
"""The form's fields (each kept in the next page's link)."""
MAX_FIELD = 1000
"""The longest value taken from any field."""
DATALIST = 500
"""Queue names offered in the form's list."""


def _checked(board: Dashboard, form: Mapping[str, str]) -> dict[str, Any]:
    """Run the search the form describes; ``ran`` False when it describes none yet."""
    where = form["where"] or "live"
    if where not in ("live", "archive"):
        raise InvalidArgument("where must be live or archive")
    if not (form["queue"] or form["id"]):
        return {"ran": False, "page": None}
    if form["queue"]:
        board.conn.keys(form["queue"])  # the name is checked before anything is read
    payload = (search_live.PayloadMatch.parse(form["payload"], form["match"] or "text")
               if form["payload"] else None)
    since, until = pages._ms(form["since"], "since"), pages._ms(form["until"], "until")
    time_of = form["time_of"] or "created"
    if time_of not in ("created", "finished"):
        raise InvalidArgument("time_of must be created or finished")
    if where == "archive":
        if board.floor is None:
            raise InvalidArgument("no floor: start the dashboard with --floor PATH")
        if not form["queue"]:
            raise InvalidArgument("choose a queue to search the archive")
        outcome = form["outcome"] or None
        if outcome is not None and outcome not in search_archive.OUTCOMES:
            raise InvalidArgument(f"unknown outcome {outcome[:20]!r}")
        query = search_archive.ArchiveQuery(
            form["queue"], form["id"] or None, form["name"] or None, outcome, since, until,
            payload, form["cursor"] or None)
        return {"ran": True, "page": search_archive.search(board.floor, query)}
    state = form["state"] or "pending"
    if state not in reads.STATES:
        raise InvalidArgument(f"state must be one of {', '.join(reads.STATES)}")
    live = search_live.LiveQuery(
        form["queue"] or None, state, form["id"] or None, form["name"] or None, time_of,
        since, until, payload, pages._number(form["start"] or None, 0, 10**12))
    return {"ran": True, "page": search_live.search(board.conn, live, board.queues.names())}


def _context(board: Dashboard, params: Mapping[str, str]) -> dict[str, Any]:
    form = {k: str(params.get(k) or "")[:MAX_FIELD] for k in FIELDS}
    try:
        found = _checked(board, form)
        error = None
    except EchoMQError as exc:
        found, error = {"ran": False, "page": None}, str(exc)
    return {**found, "error": error, "form": form,
            "names": board.queues.names()[:DATALIST], "states": reads.STATES,
            "outcomes": search_archive.OUTCOMES, "bound": search_live.SCAN_BOUND,
            "matches_most": search_live.MATCHES, "sql": None,
            "sql_rows": sql_box.MAX_ROWS, "sql_timeout": sql_box.TIMEOUT_S,
            "sql_open": sql_open(board)}


def sql_open(board: Dashboard) -> bool:
    """The SQL box is offered: a floor, a token to pass, and actions allowed."""
    return board.floor is not None and board.token is not None and not board.read_only


async def search(board: Dashboard, request: Request) -> Response:
    context = await board.call(_context, board, request.query_params)
    return board.render(request, "search.html", status=400 if context["error"] else 200,
                        **context)


async def results(board: Dashboard, request: Request) -> Response:
    """The results alone (htmx swaps them in; an error shows in their place)."""
    context = await board.call(_context, board, request.query_params)
    return board.render(request, "_search_results.html", **context)


async def sql(board: Dashboard, request: Request) -> Response:
    if board.read_only:
        return PlainTextResponse("the dashboard is read-only", status_code=403)
    form = await request.form()
    if not csrf_ok(request, form):
        return PlainTextResponse("missing or wrong CSRF token", status_code=403)
    if not sql_open(board):
        return PlainTextResponse("the SQL box needs a floor (--floor) and a token "
                                 "(--token-file)", status_code=403)
    assert board.floor is not None
    answer = await board.call(sql_box.run, board.floor, str(form.get("sql") or ""))
    context = await board.call(_context, board, {"where": "archive"})
    context["sql"] = answer
    return board.render(request, "search.html", status=400 if answer.error else 200,
                        **context)
