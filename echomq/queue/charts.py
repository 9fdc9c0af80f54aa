"""Chart data over time, read from the buckets the settling scripts keep.

Every settle writes its minute's hash in the same call (``lua/_lib_charts.lua``): counts by
outcome, a log-bucket histogram of run and wait times, the pending backlog. Each minute is
folded once into a 15-minute and a 2-hour hash, so the last hour reads 60 minute hashes,
the day 96 quarter hashes and the week 84 two-hour hashes: one pipelined read whatever the
queue's traffic (plus, for the day and the week, the one minute not folded yet).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from echomq.queue.connection import Connection

MINUTE_MS = 60_000


@dataclass(frozen=True)
class Span:
    """One range a chart shows: ``points`` buckets of ``step_ms``, newest last."""

    name: str
    level: str
    step_ms: int
    points: int

    @property
    def minutes(self) -> int:
        return self.step_ms // MINUTE_MS

    def first(self, now_ms: int) -> int:
        """The index (time // step) of the oldest point shown at ``now_ms``."""
        return now_ms // self.step_ms - self.points + 1


SPANS = {
    "hour": Span("hour", "m", MINUTE_MS, 60),
    "day": Span("day", "q", 15 * MINUTE_MS, 96),
    "week": Span("week", "h", 120 * MINUTE_MS, 84),
}
"""The ranges: the last hour by minute, the day by 15 minutes, the week by 2 hours."""

OUTCOMES = ("completed", "retried", "dead", "cancelled")
_KIND: dict[str, tuple[int, int]] = {
    **{f"r{b}": (0, b) for b in range(128)}, **{f"w{b}": (0 + 1, b) for b in range(128)},
    "p": (2, 0), "c": (3, 0), "f": (3, 1), "d": (3, 2), "x": (3, 3)}
"""A bucket hash's field: (0 run, 1 wait: the time bucket; 2 the backlog; 3 an outcome:
its index in OUTCOMES). One lookup per field: a week's read adds thousands."""
_COMBINED = re.compile(r"([cxfdt])([0-9]{1,3})\.([0-9]{0,3})")
"""A minute's field counting an outcome (``t``: none) with its run and wait buckets."""


def bucket_bounds(b: int) -> tuple[float, float]:
    """The ms a time bucket holds, ``[low, high)``: ``_lib_charts.lua``'s log buckets."""
    if b <= 0:
        return 0.0, 1.0
    return 2 ** ((b - 1) / 2), 2 ** (b / 2)


def quantile(hist: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a bucket histogram, interpolated geometrically inside
    its bucket (within ~19% of the true value); None when empty."""
    total = sum(hist.values())
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for b in sorted(hist):
        n = hist[b]
        if n <= 0:
            continue
        if seen + n >= rank:
            low, high = bucket_bounds(b)
            part = (rank - seen) / n
            if low <= 0:
                return high * part
            return low * math.exp(math.log(high / low) * part)
        seen += n
    return bucket_bounds(max(hist))[1]


@dataclass
class Point:
    """One bucket of a chart, summed over the queues read."""

    start_ms: int
    completed: int = 0
    retried: int = 0
    dead: int = 0
    cancelled: int = 0
    backlog: int | None = None
    run: dict[int, int] = field(default_factory=dict)
    wait: dict[int, int] = field(default_factory=dict)
    source: str = ""
    """``buckets``, ``archive`` (backfilled from the floor: counts only) or '' (none)."""

    def add_fields(self, fields: Mapping[str, str], latest: bool = True) -> None:
        """Add one bucket hash (its backlog replaces this one's when ``latest``)."""
        if not fields:
            return
        self.source = "buckets"
        hists = (self.run, self.wait)
        for name, raw in fields.items():
            try:
                n = int(raw)
            except ValueError:
                continue  # someone else's field: never a 500
            kind = _KIND.get(name)
            if kind is None:
                self._add_combined(name, n)
                continue
            which, b = kind
            if which < 2:
                hist = hists[which]
                hist[b] = hist.get(b, 0) + n
            elif which == 2:
                if latest or self.backlog is None:
                    self.backlog = n
            else:
                outcome = OUTCOMES[b]
                setattr(self, outcome, getattr(self, outcome) + n)

    def _add_combined(self, name: str, n: int) -> None:
        """A minute's ``<o><run bucket>.<wait bucket>`` field (``_lib_charts.lua``)."""
        found = _COMBINED.fullmatch(name)
        if found is None:
            return
        head, rb, wb = found.groups()
        if head != "t":
            outcome = OUTCOMES[_KIND[head][1]]
            setattr(self, outcome, getattr(self, outcome) + n)
        self.run[int(rb)] = self.run.get(int(rb), 0) + n
        if wb:
            self.wait[int(wb)] = self.wait.get(int(wb), 0) + n

    def merge(self, other: Point) -> None:
        """Add another queue's point at the same time."""
        for name in OUTCOMES:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.backlog is not None:
            self.backlog = (self.backlog or 0) + other.backlog
        for mine, theirs in ((self.run, other.run), (self.wait, other.wait)):
            for b, n in theirs.items():
                mine[b] = mine.get(b, 0) + n
        if other.source and self.source != "buckets":
            self.source = other.source

    @property
    def finished(self) -> int:
        return self.completed + self.retried + self.dead + self.cancelled

    @property
    def failure_rate(self) -> float | None:
        """Failed attempts (retried or dead) over settled attempts, cancellations aside."""
        tried = self.completed + self.retried + self.dead
        return (self.retried + self.dead) / tried if tried else None

    def run_ms(self, q: float) -> float | None:
        return quantile(self.run, q)

    def wait_ms(self, q: float) -> float | None:
        return quantile(self.wait, q)


def read(conn: Connection, queues: Sequence[str], span: Span, now_ms: int
         ) -> dict[str, list[Point]]:
    """Each queue's points over ``span`` ending at ``now_ms`` (server clock), oldest
    first, in one pipeline (a second, small one for the day and the week: each queue's
    minute not folded yet). The last point's backlog is read live (``ZCARD pending``)."""
    first = span.first(now_ms)
    indexes = range(first, first + span.points)
    pipe = conn.redis.pipeline(transaction=False)
    for queue in queues:
        keys = conn.keys(queue)
        for index in indexes:
            pipe.hgetall(keys.chart(span.level, index))
        pipe.get(keys.chart_tip)
        pipe.zcard(keys.pending)
    replies = pipe.execute()
    per = span.points + 2
    found: dict[str, list[Point]] = {}
    tips: list[tuple[str, int]] = []
    for n, queue in enumerate(queues):
        chunk = replies[n * per:(n + 1) * per]
        points = [Point(i * span.step_ms) for i in indexes]
        for point, fields in zip(points, chunk[:span.points], strict=True):
            point.add_fields(fields)
        points[-1].backlog = int(chunk[-1])
        tip = _int(chunk[-2])
        if span.level != "m" and tip is not None and first <= tip // span.minutes:
            tips.append((queue, tip))
        found[queue] = points
    if tips:
        _add_tips(conn, span, first, tips, found)
    return found


def _add_tips(conn: Connection, span: Span, first: int, tips: list[tuple[str, int]],
              found: dict[str, list[Point]]) -> None:
    """Add each queue's unfolded minute to the coarse point holding it."""
    pipe = conn.redis.pipeline(transaction=False)
    for queue, tip in tips:
        pipe.hgetall(conn.keys(queue).chart("m", tip))
    for (queue, tip), fields in zip(tips, pipe.execute(), strict=True):
        at = tip // span.minutes - first
        if 0 <= at < span.points:
            point = found[queue][at]
            live = point.backlog if at == span.points - 1 else None
            point.add_fields(fields)
            if live is not None:
                point.backlog = live


def merged(per_queue: Iterable[list[Point]], span: Span, now_ms: int) -> list[Point]:
    """The points of many queues summed, point by point."""
    lists = list(per_queue)
    if len(lists) == 1:
        return lists[0]
    first = span.first(now_ms)
    total = [Point((first + i) * span.step_ms) for i in range(span.points)]
    for points in lists:
        for mine, theirs in zip(total, points, strict=True):
            mine.merge(theirs)
    return total


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
