"""Charts drawn as SVG on the server: no script, no build step, nothing fetched.

Readable without colour: each outcome's bars have their own pattern (solid, hatched,
cross-hatched, dotted), p50 lines are solid and p95 lines dashed, every chart has a
legend in words, a ``<title>`` and a ``<desc>`` naming what it shows, and each bar or
point a ``<title>`` with its numbers (the page adds the same numbers as a table). Every
text is escaped here (``markupsafe``); colours come from classes in ``app.css``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup, escape

from echomq.queue.charts import Point, Span

W, H = 480, 150
LEFT, RIGHT, TOP, BOTTOM = 58, 8, 10, 24
PLOT_W, PLOT_H = W - LEFT - RIGHT, H - TOP - BOTTOM

OUTCOME_STYLE = (
    # outcome, what the legend says, the pattern that draws it
    ("completed", "completed", "solid"),
    ("retried", "failed, retried", "hatch"),
    ("dead", "dead", "cross"),
    ("cancelled", "cancelled", "dots"),
)


@dataclass(frozen=True)
class Series:
    """One line of a line chart: its name, its values (None: no data), its look."""

    name: str
    values: Sequence[float | None]
    css: str
    dashed: bool = False


def stamp(ms: int) -> str:
    """A point's start as UTC text."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M") + "Z"


def _ago(span: Span, i: int) -> str:
    minutes = (span.points - 1 - i) * span.minutes
    if minutes == 0:
        return "now"
    if minutes < 120:
        return f"{minutes} min ago"
    if minutes < 2880:
        return f"{minutes / 60:g} h ago"
    return f"{minutes / 1440:g} d ago"


def _nice(top: float) -> float:
    """A round axis maximum at or above ``top``."""
    if top <= 0:
        return 1.0
    scale = 10.0 ** (len(str(int(top))) - 1)
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if step * scale >= top:
            return step * scale
    return float(top)


def number(value: float) -> str:
    """A count for an axis: whole numbers plain, a fraction with two digits."""
    return f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:.2g}"


def _frame(cid: str, title: str, desc: str, span: Span, top: float,
           fmt: Callable[[float], str], body: list[str], legend: list[tuple[str, str]]
           ) -> Markup:
    """The SVG around a chart's marks: axes, grid, labels, legend, title."""
    out = [f'<svg class="chart" id="{cid}" viewBox="0 0 {W} {H + 22}" role="img" '
           f'aria-labelledby="{cid}-t {cid}-d" xmlns="http://www.w3.org/2000/svg">',
           f'<title id="{cid}-t">{escape(title)}</title>',
           f'<desc id="{cid}-d">{escape(desc)}</desc>', _patterns(cid)]
    for frac in (0, 0.5, 1):
        y = TOP + PLOT_H * (1 - frac)
        out.append(f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" '
                   f'y2="{y:.1f}"/>')
        out.append(f'<text class="axis" x="{LEFT - 4}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{escape(fmt(top * frac))}</text>')
    for i in (0, span.points // 2, span.points - 1):
        x = LEFT + PLOT_W * (i + 0.5) / span.points
        out.append(f'<text class="axis" x="{x:.1f}" y="{H - 6}" text-anchor="middle">'
                   f'{escape(_ago(span, i))}</text>')
    out.extend(body)
    x = LEFT
    for item, label in legend:
        out.append(f'<g class="legend" transform="translate({x},{H + 6})">{item}</g>')
        x += 36 + 6 * len(label)
    out.append("</svg>")
    return Markup("".join(out))


def _patterns(cid: str) -> str:
    """One pattern per outcome, so bars differ in texture, not only in colour."""
    return (
        "<defs>"
        f'<pattern id="{cid}-solid" width="4" height="4" patternUnits="userSpaceOnUse">'
        '<rect class="o-completed" width="4" height="4"/></pattern>'
        f'<pattern id="{cid}-hatch" width="6" height="6" patternUnits="userSpaceOnUse">'
        '<rect class="o-bg" width="6" height="6"/>'
        '<path class="o-retried" d="M0,6 L6,0" stroke-width="2"/></pattern>'
        f'<pattern id="{cid}-cross" width="6" height="6" patternUnits="userSpaceOnUse">'
        '<rect class="o-dead" width="6" height="6"/>'
        '<path class="o-ink" d="M0,0 L6,6 M6,0 L0,6" stroke-width="1.2"/></pattern>'
        f'<pattern id="{cid}-dots" width="5" height="5" patternUnits="userSpaceOnUse">'
        '<rect class="o-bg" width="5" height="5"/>'
        '<circle class="o-cancelled" cx="2.5" cy="2.5" r="1.5"/></pattern>'
        "</defs>")


def finished_bars(cid: str, title: str, span: Span, points: Sequence[Point]) -> Markup:
    """Jobs finished per bucket, stacked by outcome."""
    top = _nice(max((p.finished for p in points), default=0))
    slot = PLOT_W / span.points
    body = []
    for i, p in enumerate(points):
        if not p.finished:
            continue
        x = LEFT + slot * i + slot * 0.1
        y = TOP + PLOT_H
        parts = [f"{getattr(p, o)} {label}" for o, label, _ in OUTCOME_STYLE if getattr(p, o)]
        body.append(f'<g class="bar" data-start="{p.start_ms}"><title>'
                    f'{escape(stamp(p.start_ms))}: {escape(", ".join(parts))}</title>')
        for outcome, _, pattern in OUTCOME_STYLE:
            n = getattr(p, outcome)
            if not n:
                continue
            h = PLOT_H * n / top
            y -= h
            body.append(f'<rect class="seg {outcome}" x="{x:.1f}" y="{y:.1f}" '
                        f'width="{slot * 0.8:.1f}" height="{h:.1f}" '
                        f'fill="url(#{cid}-{pattern})"/>')
        body.append("</g>")
    legend = [(f'<rect class="swatch" width="14" height="10" fill="url(#{cid}-{pattern})"/>'
               f'<text x="18" y="9">{escape(label)}</text>', label)
              for _, label, pattern in OUTCOME_STYLE]
    total = sum(p.finished for p in points)
    desc = (f"Jobs finished per {span.minutes} min over the last {span.name}, stacked by "
            f"outcome: {total:,} in all. The table below has the numbers.")
    return _frame(cid, title, desc, span, top, number, body, legend)


def line_chart(cid: str, title: str, span: Span, series: Sequence[Series],
               fmt: Callable[[float], str], fixed_top: float | None = None) -> Markup:
    """Lines over the buckets; a gap where a bucket has no value; a marker per value."""
    values = [v for s in series for v in s.values if v is not None]
    top = fixed_top if fixed_top is not None else _nice(max(values, default=0))
    slot = PLOT_W / span.points
    body = []
    for s in series:
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        run: list[str] = []
        marks = []
        for i, v in enumerate(s.values):
            if v is None:
                if len(run) > 1:
                    body.append(f'<polyline class="line {s.css}"{dash} fill="none" '
                                f'points="{" ".join(run)}"/>')
                run = []
                continue
            x = LEFT + slot * (i + 0.5)
            y = TOP + PLOT_H * (1 - min(v, top) / top)
            run.append(f"{x:.1f},{y:.1f}")
            marks.append(f'<circle class="dot {s.css}" cx="{x:.1f}" cy="{y:.1f}" r="2.2">'
                         f'<title>{escape(s.name)} {escape(fmt(v))}</title></circle>')
        if len(run) > 1:
            body.append(f'<polyline class="line {s.css}"{dash} fill="none" '
                        f'points="{" ".join(run)}"/>')
        body.extend(marks)
    legend = [(f'<line class="line {s.css}" x1="0" x2="22" y1="5" y2="5"'
               f'{" stroke-dasharray=" + chr(34) + "6 4" + chr(34) if s.dashed else ""}/>'
               f'<text x="26" y="9">{escape(s.name)}</text>', s.name) for s in series]
    shown = ", ".join(s.name for s in series)
    desc = (f"{shown} per {span.minutes} min over the last {span.name}; "
            f"a gap where nothing was measured. The table below has the numbers.")
    return _frame(cid, title, desc, span, top, fmt, body, legend)


def duration(ms: float) -> str:
    """Milliseconds as a short text for an axis or a table."""
    if ms < 1000:
        return f"{ms:.0f} ms" if ms >= 10 or ms == 0 else f"{ms:.1f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def percent(rate: float) -> str:
    return f"{rate * 100:.0f}%" if rate == 0 or rate >= 0.1 else f"{rate * 100:.1f}%"
