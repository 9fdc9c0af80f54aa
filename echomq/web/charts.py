"""The charts of the overview and of a queue page: points read from the settle scripts'
snapshots (:mod:`echomq.queue.charts`), older ones backfilled from the archive floor when
the dashboard has one, drawn as SVG (:mod:`echomq.web.chart_svg`) with a table beside.

Backfill fills the points before a queue's oldest counted point (a queue older than its
snapshots, or snapshots lost with a Redis that kept no data) with the floor's counts by
outcome (no times: the floor's time indexes are walked, no entry is read), at most
``BACKFILL_BUDGET`` index keys a request. A point the floor's checkpoint has passed never
changes, so its counts are kept (``BACKFILL_CACHED`` points at most): the next refresh goes
further back.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from echomq.errors import InvalidArgument
from echomq.queue import charts
from echomq.queue.charts import SPANS, Point, Span
from echomq.web import chart_svg
from echomq.web.chart_svg import Series, duration, percent
from echomq.web.reads import server_ms

if TYPE_CHECKING:
    from echomq.archive.floor import Floor
    from echomq.web.app import Dashboard

BACKFILL_BUDGET = 10_000
"""Floor index keys one request may walk to backfill points."""
BACKFILL_CACHED = 20_000
"""Backfilled points kept in this process (final ones only)."""
CAPTIONS = {"finished": "Jobs finished, by outcome", "failures": "Failure rate",
            "run": "Run time (p50, p95)", "wait": "Wait time (p50, p95)",
            "backlog": "Pending backlog"}
"""Each chart's caption on the page (its SVG's title says the range and the queues)."""
_cache: OrderedDict[tuple[str, str, int, int], dict[str, int]] = OrderedDict()


def span_of(request: Request) -> Span:
    """The range asked for (``range``: hour, day or week; hour when not given)."""
    name = request.query_params.get("range") or "hour"
    if name not in SPANS:
        raise InvalidArgument(f"range must be one of {', '.join(SPANS)}")
    return SPANS[name]


def points(board: Dashboard, queues: list[str], span: Span) -> tuple[list[Point], str]:
    """The points of ``queues`` summed, and a note on what the floor added."""
    now = server_ms(board.conn)
    per = charts.read(board.conn, queues, span, now)
    note = ""
    if board.floor is not None and per:
        note = _backfill(board.floor, per, span)
    return charts.merged(per.values(), span, now), note


def _backfill(floor: Floor, per: dict[str, list[Point]], span: Span) -> str:
    """Counts from the floor for each queue's points before its oldest counted one."""
    from echomq.archive.floor_counts import floor_counts

    known = set(floor.queues())
    budget, added, short = BACKFILL_BUDGET, 0, False
    for queue, pts in per.items():
        if queue not in known or budget <= 0:
            short = short or queue in known
            continue
        first = next((i for i, p in enumerate(pts) if p.source), len(pts))
        wanted = pts[:first]
        if not wanted:
            continue
        checkpoint = int(floor.checkpoint(queue).split("-")[0] or 0)
        key = str(floor.path)
        todo = []
        for p in wanted:
            hit = _cache.get((key, queue, span.step_ms, p.start_ms))
            if hit is not None:
                _cache.move_to_end((key, queue, span.step_ms, p.start_ms))
                _fill(p, hit)
            else:
                todo.append(p)
        if not todo:
            continue
        found = floor_counts(floor, queue, [p.start_ms for p in todo], span.step_ms,
                             budget=budget)
        budget -= found.walked
        short = short or found.exhausted
        for p in todo:
            counts = found.counts.get(p.start_ms)
            if counts is None:
                continue
            _fill(p, counts)
            added += 1
            if p.start_ms + span.step_ms <= checkpoint:
                _cache[(key, queue, span.step_ms, p.start_ms)] = counts
                if len(_cache) > BACKFILL_CACHED:
                    _cache.popitem(last=False)
    if short:
        return ("older points are partly from the archive: its count stopped after "
                f"{BACKFILL_BUDGET:,} outcomes (a refresh goes further)")
    return "older points come from the archive (counts only)" if added else ""


def _fill(p: Point, counts: dict[str, int]) -> None:
    if not any(counts.values()):
        return
    p.completed += counts.get("completed", 0)
    p.dead += counts.get("dead", 0)
    p.cancelled += counts.get("cancelled", 0)
    if not p.source:
        p.source = "archive"


def context(board: Dashboard, queues: list[str], span: Span, subject: str
            ) -> dict[str, Any]:
    """What ``_charts.html`` shows for ``queues`` (``subject`` names them)."""
    pts, note = points(board, queues, span)
    every = f"per {span.minutes} min" if span.minutes > 1 else "per minute"
    svgs: list[tuple[str, Markup]] = [
        ("finished", chart_svg.finished_bars(
            "chart-finished", f"Jobs finished {every}, by outcome: {subject}", span, pts)),
        ("failures", chart_svg.line_chart(
            "chart-failures", f"Failure rate {every}: {subject}", span,
            [Series("failed / settled", [p.failure_rate for p in pts], "s-fail")],
            percent, fixed_top=1.0)),
        ("run", chart_svg.line_chart(
            "chart-run", f"Run time {every}: {subject}", span,
            [Series("run p50", [p.run_ms(0.5) for p in pts], "s-p50"),
             Series("run p95", [p.run_ms(0.95) for p in pts], "s-p95", dashed=True)],
            duration)),
        ("wait", chart_svg.line_chart(
            "chart-wait", f"Wait time {every}: {subject}", span,
            [Series("wait p50", [p.wait_ms(0.5) for p in pts], "s-p50"),
             Series("wait p95", [p.wait_ms(0.95) for p in pts], "s-p95", dashed=True)],
            duration)),
        ("backlog", chart_svg.line_chart(
            "chart-backlog", f"Pending backlog: {subject}", span,
            [Series("pending", [None if p.backlog is None else float(p.backlog)
                                for p in pts], "s-backlog")],
            chart_svg.number)),
    ]
    rows = [_row(p) for p in pts if p.source or p.backlog]
    return {"chart_span": span.name, "chart_spans": list(SPANS), "chart_svgs": svgs,
            "chart_captions": CAPTIONS,
            "chart_rows": rows, "chart_note": note, "chart_queues": len(queues)}


def _row(p: Point) -> dict[str, Any]:
    def opt(value: float | None, fmt: Any) -> str:
        return "-" if value is None else str(fmt(value))

    return {"at": chart_svg.stamp(p.start_ms), "completed": p.completed,
            "retried": p.retried, "dead": p.dead, "cancelled": p.cancelled,
            "failure_rate": opt(p.failure_rate, percent),
            "run_p50": opt(p.run_ms(0.5), duration), "run_p95": opt(p.run_ms(0.95), duration),
            "wait_p50": opt(p.wait_ms(0.5), duration),
            "wait_p95": opt(p.wait_ms(0.95), duration),
            "backlog": "-" if p.backlog is None else p.backlog,
            "source": p.source or "-"}


async def fragment(board: Dashboard, request: Request) -> Response:
    """The charts alone (htmx refreshes them): a queue's (``queue``) or, without one, the
    queues ``q`` filters on the overview's first page."""
    span = span_of(request)
    queue = request.query_params.get("queue")
    if queue:
        board.conn.keys(queue)  # the name is checked before any read
        ctx = await board.call(context, board, [queue], span, queue)
        return board.render(request, "_charts.html", queue=queue, **ctx)
    from echomq.web.pages import overview_queues, page_number

    names = await board.call(overview_queues, board, request.query_params)
    ctx = await board.call(context, board, names, span, f"{len(names)} queue(s)")
    return board.render(request, "_charts.html", queue=None,
                        q=request.query_params.get("q", ""),
                        page=page_number(request.query_params.get("page")), **ctx)
