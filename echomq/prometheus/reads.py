"""One scrape's reads from Redis: a few pipelined round trips for every queue at once.

Every read is a bounded range or a counter: set sizes, the counter and histogram hashes
the settle scripts keep, the head of each priority band of ``pending`` (FIFO within a
band, so each band's head is its oldest job), ``ZCOUNT`` of lapsed leases, and the
stream's length and first unfolded entry. Nothing here walks a whole set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from echomq.archive.stream_read import UNDECODED
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys

STATES = ("pending", "scheduled", "active", "completed", "dead")
BAND = 2**43
"""The pending score is ``priority * 2^43 + seq`` (``emq_score`` in _lib.lua)."""
MAX_BANDS = 8
"""Priority bands whose heads are read for the oldest pending age (lowest first)."""
MAX_LANES = 100
"""Group lanes whose heads are read for the oldest pending age."""


@dataclass
class QueueSample:
    """What one scrape read for one queue (times in ms on the server clock)."""

    queue: str
    jobs: dict[str, int] = field(default_factory=dict)
    finished: dict[str, int] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)
    """Worker events (``queue/worker_events.py``): runs that timed out, were abandoned or
    killed; worker child processes that died, were restarted or recycled."""
    stalls: dict[str, int] = field(default_factory=dict)
    run: dict[str, int] = field(default_factory=dict)
    wait: dict[str, int] = field(default_factory=dict)
    past_due: int = 0
    paused: bool = False
    oldest_created: int | None = None
    declared: bool = False
    stream_length: int = 0
    oldest_unfolded: int | None = None


def server_ms(conn: Connection) -> int:
    """Now on the server clock, the clock every score and row time is written in."""
    seconds, micros = conn.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _ints(raw: Mapping[str, str]) -> dict[str, int]:
    return {str(k): int(v) for k, v in raw.items()}


def sample(conn: Connection, queues: Iterable[str], declared: set[str],
           checkpoints: Mapping[str, str], now: int) -> list[QueueSample]:
    """Read every queue in ``queues``; ``checkpoints`` holds the floor's, when known."""
    samples = [QueueSample(q, declared=q in declared) for q in sorted(queues)]
    keys = {s.queue: conn.keys(s.queue) for s in samples}
    pipe = conn.redis.pipeline(transaction=False)
    for s in samples:
        k = keys[s.queue]
        for state in STATES:
            pipe.zcard(getattr(k, state))
        pipe.smembers(k.groups)
        for name in ("finished", "stalls", "run", "wait", "workers"):
            pipe.hgetall(k.metric(name))
        pipe.zcount(k.active, "-inf", now)
        pipe.hexists(k.meta, "paused")
        pipe.zrange(k.pending, 0, 0, withscores=True)
        if s.declared:
            pipe.xlen(k.completions)
            # undecoded: an entry holding bytes that are not UTF-8 must not fail a scrape
            pipe.execute_command("XRANGE", k.completions,
                                 f"({checkpoints.get(s.queue, '0-0')}", "+", "COUNT", 1,
                                 **UNDECODED)  # type: ignore[no-untyped-call]
    replies = iter(pipe.execute())
    heads: dict[str, list[str]] = {}
    bands: dict[str, float] = {}
    lanes: dict[str, list[str]] = {}
    for s in samples:
        for state in STATES:
            s.jobs[state] = int(next(replies))
        lanes[s.queue] = sorted(str(g) for g in next(replies) or ())
        s.finished, s.stalls, s.run, s.wait, s.workers = (
            _ints(next(replies)) for _ in range(5))
        s.past_due = int(next(replies))
        s.paused = bool(next(replies))
        head = next(replies)
        heads[s.queue] = [str(head[0][0])] if head else []
        if head:
            bands[s.queue] = float(head[0][1])
        if s.declared:
            s.stream_length = int(next(replies))
            first = next(replies)
            s.oldest_unfolded = int(first[0][0].partition(b"-")[0]) if first else None
    _lane_sizes_and_heads(conn, samples, keys, lanes, heads)
    _band_heads(conn, keys, bands, heads)
    _oldest_created(conn, samples, keys, heads)
    return samples


def _lane_sizes_and_heads(conn: Connection, samples: list[QueueSample], keys: dict[str, Keys],
                          lanes: dict[str, list[str]], heads: dict[str, list[str]]) -> None:
    """Pending includes every group lane (as ``echomq.counts`` does); the heads of the
    first MAX_LANES lanes (by name) join the oldest pending age."""
    if not any(lanes.values()):
        return
    pipe = conn.redis.pipeline(transaction=False)
    for s in samples:
        for n, group in enumerate(lanes[s.queue]):
            pipe.zcard(keys[s.queue].lane(group))
            if n < MAX_LANES:
                pipe.zrange(keys[s.queue].lane(group), 0, 0)
    replies = iter(pipe.execute())
    for s in samples:
        for n, _ in enumerate(lanes[s.queue]):
            s.jobs["pending"] += int(next(replies))
            if n < MAX_LANES:
                heads[s.queue] += [str(i) for i in next(replies)]


def _band_heads(conn: Connection, keys: dict[str, Keys], bands: dict[str, float],
                heads: dict[str, list[str]]) -> None:
    """The head of each next priority band, one pipelined round per band."""
    for _ in range(MAX_BANDS - 1):
        if not bands:
            return
        pipe = conn.redis.pipeline(transaction=False)
        order = list(bands)
        for queue in order:
            start = (int(bands[queue]) // BAND + 1) * BAND
            pipe.zrangebyscore(keys[queue].pending, start, "+inf", start=0, num=1,
                               withscores=True)
        for queue, found in zip(order, pipe.execute(), strict=True):
            if found:
                heads[queue].append(str(found[0][0]))
                bands[queue] = float(found[0][1])
            else:
                del bands[queue]


def _oldest_created(conn: Connection, samples: list[QueueSample], keys: dict[str, Keys],
                    heads: dict[str, list[str]]) -> None:
    pipe = conn.redis.pipeline(transaction=False)
    for s in samples:
        for job_id in heads[s.queue]:
            pipe.hget(keys[s.queue].job(job_id), "created_at")
    replies: Any = iter(pipe.execute())
    for s in samples:
        times = [int(t) for t in (next(replies) for _ in heads[s.queue]) if t is not None]
        s.oldest_created = min(times) if times else None
