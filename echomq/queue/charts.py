"""Chart data over time, from the snapshots the settling scripts keep.

The settle scripts keep lifetime counters and run/wait histograms per queue (the
Prometheus metrics); the first settling call of each minute also snapshots them, once
into that minute's key and, when it is the first of its 15 minutes or 2 hours, into those
keys (``lua/_lib_charts.lua``). A snapshot is the counters at the start of its span, so a
point is the next point's snapshot less its own (the last one: the live counters less
it): the last hour reads 60 minute snapshots, the day 96 quarter ones, the week 84
two-hour ones, in one pipeline with the live counters, whatever the queue's traffic.
"""

from __future__ import annotations

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
BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000,
              900000, 3600000)
"""The histograms' upper bounds: ``EMQ_BUCKETS_MS`` in ``_lib.lua`` (and Prometheus')."""
_BUCKET_FIELDS = (*(str(b) for b in BUCKETS_MS), "inf")
_RUN_KEYS = tuple("r:" + f for f in _BUCKET_FIELDS)
_WAIT_KEYS = tuple("w:" + f for f in _BUCKET_FIELDS)
_OUTCOME_KEYS = tuple((o, "f:" + o) for o in ("completed", "retried", "dead", "cancelled"))


def bucket_bounds(b: int) -> tuple[float, float]:
    """The ms histogram bucket ``b`` holds, ``(low, high]`` (the last: past the bounds)."""
    low = 0.0 if b == 0 else float(BUCKETS_MS[min(b, len(BUCKETS_MS)) - 1])
    high = float(BUCKETS_MS[b]) if b < len(BUCKETS_MS) else low
    return low, high


def quantile(hist: Mapping[int, int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a bucket histogram, interpolated linearly inside its
    bucket as Prometheus' ``histogram_quantile`` does; None when empty."""
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
            return low + (high - low) * (rank - seen) / n
        seen += n
    return bucket_bounds(max(hist))[0]


Snapshot = dict[str, int]


def parse_snapshot(text: str | None) -> Snapshot | None:
    """A snapshot's text (``p 3 f:completed 10 r:5 2 ...``) as a dict; None when absent."""
    if not text:
        return None
    tokens = text.split(" ")
    found: Snapshot = {}
    for name, raw in zip(tokens[0::2], tokens[1::2], strict=False):
        try:
            found[name] = int(raw)
        except ValueError:
            continue  # someone else's text: never a 500
    return found


def live_snapshot(finished: Mapping[str, str], run: Mapping[str, str],
                  wait: Mapping[str, str], backlog: int) -> Snapshot:
    """The counters now, in a snapshot's form."""
    found: Snapshot = {"p": backlog}
    for tag, fields in (("f:", finished), ("r:", run), ("w:", wait)):
        for name, raw in fields.items():
            try:
                found[tag + name] = int(raw)
            except ValueError:
                continue
    return found


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
    """``redis`` (the snapshots), ``archive`` (backfilled from the floor: counts only)
    or '' (nothing counted)."""

    def add_diff(self, later: Snapshot, earlier: Snapshot) -> None:
        """The counts between two snapshots (a counter that went down was reset:
        nothing is counted for it)."""
        if later is earlier:
            return
        for outcome, key in _OUTCOME_KEYS:
            setattr(self, outcome, max(0, later.get(key, 0) - earlier.get(key, 0)))
        for keys, hist in ((_RUN_KEYS, self.run), (_WAIT_KEYS, self.wait)):
            for b, key in enumerate(keys):
                n = later.get(key, 0) - earlier.get(key, 0)
                if n > 0:
                    hist[b] = n
        if self.finished:
            self.source = "redis"

    def merge(self, other: Point) -> None:
        """Add another queue's point at the same time."""
        for name in OUTCOMES:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.backlog is not None:
            self.backlog = (self.backlog or 0) + other.backlog
        for mine, theirs in ((self.run, other.run), (self.wait, other.wait)):
            for b, n in theirs.items():
                mine[b] = mine.get(b, 0) + n
        if other.source and self.source != "redis":
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
        return self._quantile("run", q)

    def wait_ms(self, q: float) -> float | None:
        return self._quantile("wait", q)

    def _quantile(self, which: str, q: float) -> float | None:
        """Kept once asked (a chart and its table ask each twice): call it after the
        point's last add_diff or merge."""
        known = self.__dict__.setdefault("_quantiles", {})
        if (which, q) not in known:
            known[(which, q)] = quantile(self.run if which == "run" else self.wait, q)
        return known[(which, q)]  # type: ignore[no-any-return]


def read(conn: Connection, queues: Sequence[str], span: Span, now_ms: int
         ) -> dict[str, list[Point]]:
    """Each queue's points over ``span`` ending at ``now_ms`` (server clock), oldest
    first, in one pipeline: the span's snapshots (a GET each), the live
    counters and the backlog (``ZCARD pending``: the last point's)."""
    first = span.first(now_ms)
    indexes = range(first, first + span.points)
    pipe = conn.redis.pipeline(transaction=False)
    for queue in queues:
        keys = conn.keys(queue)
        for i in indexes:  # GETs, not one MGET: a Cluster pipeline refuses MGET
            pipe.get(keys.chart(span.level, i))
        for name in ("finished", "run", "wait"):
            pipe.hgetall(keys.metric(name))
        pipe.zcard(keys.pending)
    replies = pipe.execute()
    found: dict[str, list[Point]] = {}
    width = span.points + 4
    for n, queue in enumerate(queues):
        each = replies[n * width:(n + 1) * width]
        texts, (finished, run, wait, backlog) = each[:span.points], each[span.points:]
        snaps = [parse_snapshot(t) for t in texts]
        # the counters at each point's start: its snapshot, else the next one's (nothing
        # settled in between), else the live ones
        starts = [live_snapshot(finished, run, wait, int(backlog))] * (span.points + 1)
        for i in range(span.points - 1, -1, -1):
            starts[i] = snaps[i] or starts[i + 1]
        points = []
        for i, index in enumerate(indexes):
            point = Point(index * span.step_ms)
            point.add_diff(starts[i + 1], starts[i])
            snap = snaps[i]
            if snap is not None:
                point.backlog = snap.get("p")
            points.append(point)
        points[-1].backlog = int(backlog)
        found[queue] = points
    return found


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

