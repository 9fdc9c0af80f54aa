"""The dashboard benchmark's chart parts (``bench_web.py`` runs them): a floor of recorded
outcomes, a week of chart buckets, the chart reads, the buckets' memory, and the settle
scripts' server cost with the chart hook and without it.

The settle cost is the server's own: ``INFO commandstats`` (``cmdstat_evalsha``: usec)
over phases that run only the settle calls, after ``CONFIG RESETSTAT``, alternating the
registry's script with a copy whose chart hook lines are removed (same keys, same args).
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from typing import Any

from echomq.archive import Driver, Floor, declare
from echomq.queue import charts, registry
from echomq.queue.connection import Connection
from echomq.queue.transitions.settles import fail_call

MINUTE_MS = 60_000
DAY_MS = 86_400_000
_HOOK = re.compile(r"(?m)^(\s*)emq_chart_tick\(.*\)[ \t]*$")
"""A settling script's hook line (``function emq_chart_tick`` does not match)."""


def server_ms(conn: Connection) -> int:
    seconds, micros = conn.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def fill_floor(conn: Connection, queue: str, floor: Floor, outcomes: int, days: int = 7
               ) -> float:
    """Record ``outcomes`` outcomes settled evenly over the last ``days`` (the stream
    entries complete-2.lua writes, pipelined) and fold them into ``floor``; seconds."""
    began = time.perf_counter()
    declare(conn, queue)
    key = conn.keys(queue).completions
    now = server_ms(conn)
    first = now - days * DAY_MS
    every = days * DAY_MS / max(outcomes, 1)
    kinds = ("completed",) * 18 + ("dead", "cancelled")
    for start in range(0, outcomes, 20_000):
        pipe = conn.redis.pipeline(transaction=False)
        for i in range(start, min(start + 20_000, outcomes)):
            at = int(first + i * every)
            pipe.xadd(key, {"job": f"h{i}", "outcome": kinds[i % 20], "result": "1",
                            "attempts": "1", "at": str(at), "created_at": str(at - 900),
                            "started_at": str(at - 300)})
        pipe.execute()
        if start % 200_000 == 0:  # fold as it goes: the stream never holds them all
            Driver(conn, floor, claim_custody=True, slice_count=20_000).fold(queue)
    Driver(conn, floor, claim_custody=True, slice_count=20_000).fold(queue)
    return time.perf_counter() - began


def _snapshot(n: int) -> str:
    """A snapshot as the scripts write it, of a queue that settled ``n`` jobs (every run
    and wait bucket used: the longest a snapshot gets)."""
    parts = ["p", "1200", "f:completed", str(n), "f:retried", str(n // 50), "f:dead",
             str(n // 400), "f:cancelled", str(n // 800)]
    for tag in ("r:", "w:"):
        for bound in (*(str(b) for b in charts.BUCKETS_MS), "inf"):
            parts += [tag + bound, str(n // 17)]
        parts += [tag + "sum", str(n * 1234), tag + "count", str(n)]
    return " ".join(parts)


def fill_buckets(conn: Connection, queue: str, days: float) -> dict[str, int]:
    """Chart snapshots for the last ``days`` as the scripts keep them for a queue that
    settles every minute (minutes for the last 2 hours, every 15 minutes and 2 hours);
    the number of keys of each level written."""
    keys = conn.keys(queue)
    now = server_ms(conn)
    first = (now - int(days * DAY_MS)) // MINUTE_MS
    last = now // MINUTE_MS
    pipe = conn.redis.pipeline(transaction=False)
    written = {"m": 0, "q": 0, "h": 0}
    for m in range(first, last + 1):
        snap = _snapshot(240 * (m - first))  # 4 jobs/s
        for level, minutes, keep in (("m", 1, 2 * 3_600_000), ("q", 15, 8 * DAY_MS),
                                     ("h", 120, 8 * DAY_MS)):
            if m % minutes or (level == "m" and m < last - 2 * 60):
                continue
            pipe.set(keys.chart(level, m // minutes), snap,
                     pxat=m // minutes * minutes * MINUTE_MS + keep)
            written[level] += 1
    pipe.set(keys.chart_tip, last)
    finished = {"completed": 240 * (last - first + 1)}
    pipe.hset(keys.metric("finished"), mapping=finished)
    pipe.execute()
    return written


def bucket_memory(conn: Connection, queue: str) -> dict[str, int]:
    """MEMORY USAGE of one bucket of each level, and the bytes a queue busy every minute
    writes a day and keeps at steady state (minutes 2 h, the coarse levels 8 days)."""
    keys = conn.keys(queue)
    now = server_ms(conn) // MINUTE_MS
    size = {level: int(conn.redis.memory_usage(keys.chart(level, now // minutes - 1),
                                               samples=0) or 0)
            for level, minutes in (("m", 1), ("q", 15), ("h", 120))}
    per_day = 1440 * size["m"] + 96 * size["q"] + 12 * size["h"]
    kept = 120 * size["m"] + 8 * 96 * size["q"] + 8 * 12 * size["h"]
    return {**size, "per_day": per_day, "kept": kept}


def read_ms(conn: Connection, queue: str, span: str, runs: int) -> tuple[float, float, float]:
    """One chart's data (the pipelined read and the fold into points): the median wall
    ms, and the medians of what a loaded machine inflates least: this process's CPU ms
    and the server's (``cmdstat_hgetall`` usec)."""
    wall, cpu, server = [], [], []
    for _ in range(runs):
        conn.redis.config_resetstat()
        began, began_cpu = time.perf_counter(), time.process_time()
        now = server_ms(conn)
        charts.merged(charts.read(conn, [queue], charts.SPANS[span], now).values(),
                      charts.SPANS[span], now)
        wall.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - began_cpu) * 1000)
        stats = conn.redis.info("commandstats")
        server.append(sum(float(stats.get(f"cmdstat_{c}", {}).get("usec", 0))
                          for c in ("mget", "hgetall", "zcard", "time")) / 1000)
    return statistics.median(wall), statistics.median(cpu), statistics.median(server)


def _variant(name: str, hooked: bool) -> str:
    script = registry.named(name).script
    if not hooked:  # the hook lines go; the helper's own definition stays
        script, n = _HOOK.subn(r"\1", script)
        assert n >= 1, name
    return script


def _evalsha_usec(conn: Connection, run: Callable[[], None]) -> float:
    conn.redis.config_resetstat()
    run()
    stats = conn.redis.info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec", 0))


PHASES = (("complete-2.lua, 100 a call", "complete", 100),
          ("complete-2.lua, 1 a call", "complete", 1),
          ("fail-3.lua (a retry)", "fail", 1))


def _phase(conn: Connection, script: Any, name: str, batch: int, jobs: int, tag: str
           ) -> tuple[Callable[[], None], Callable[[], None]]:
    """``jobs`` jobs added and claimed on a fresh queue; the settle phase to measure and
    the clean-up after it."""
    import echomq

    r = conn.redis
    queue = f"settle-{tag}"
    keys = conn.keys(queue)
    echomq.add_many(conn, queue, [1] * jobs, max_attempts=3)
    held: list[tuple[str, Any]] = []
    while len(held) < jobs:
        held += [(j.id, j.token) for j in
                 echomq.claim(conn, queue, count=1000, lease_ms=3_600_000)]

    def run() -> None:
        pipe = r.pipeline(transaction=False)
        for i in range(0, len(held), batch):
            if name == "fail":
                job_id, token = held[i]
                _, k, a = fail_call(keys, job_id, token, "boom", backoff_ms=60_000,
                                    backoff_cap_ms=60_000)
            else:
                k, a = [keys.active, keys.completed], [keys.base, "0", "-1"]
                for job_id, token in held[i:i + batch]:
                    a += [job_id, token, "completed", "1"]
            script(keys=k, args=a, client=pipe)
            if len(pipe) >= 200:
                pipe.execute()
        pipe.execute()

    def clean() -> None:
        r.delete(*r.keys(keys.pattern))  # a private server: KEYS is cheap

    return run, clean


def _scripts(conn: Connection) -> dict[tuple[str, bool], Any]:
    found = {(name, hooked): conn.redis.register_script(_variant(name, hooked))
             for name in ("complete", "fail") for hooked in (True, False)}
    for script in found.values():  # loaded before anything is counted
        conn.redis.script_load(script.script)
    return found


def settle_cost(conn: Connection, jobs: int = 5_000, rounds: int = 5
                ) -> dict[str, tuple[float, float]]:
    """Server µs per settled job, (with the chart hook, without), the lowest of
    ``rounds`` alternating phases (the least disturbed by a loaded machine)."""
    scripts = _scripts(conn)
    found: dict[str, dict[bool, list[float]]] = {}
    for n in range(rounds):
        for hooked in (True, False) if n % 2 else (False, True):
            for label, name, batch in PHASES:
                run, clean = _phase(conn, scripts[(name, hooked)], name, batch, jobs,
                                    f"{n}-{hooked}-{label[:4]}-{batch}")
                usec = _evalsha_usec(conn, run)
                found.setdefault(label, {True: [], False: []})[hooked].append(usec / jobs)
                clean()
    return {label: (min(v[True]), min(v[False])) for label, v in found.items()}


def settle_instructions(jobs: int = 2_000) -> dict[str, tuple[float, float]] | None:
    """Server instructions per settled job (callgrind: steady on a loaded machine), with
    the chart hook and without; None when valgrind is missing."""
    import shutil

    from bench_instructions import counted_valkey

    import echomq
    from echomq.queue.connection import connect

    if shutil.which("callgrind_control") is None:
        return None
    found: dict[str, dict[bool, float]] = {}
    with counted_valkey("emq-settle-instr-") as valkey:
        conn = connect(valkey.url + "?socket_timeout=600")
        scripts = _scripts(conn)
        echomq.add_many(conn, "warm", [0])  # the library's scripts loaded before counting
        echomq.claim(conn, "warm")
        for hooked in (True, False):
            for label, name, batch in PHASES:
                run, clean = _phase(conn, scripts[(name, hooked)], name, batch, jobs,
                                    f"i-{hooked}-{label[:4]}-{batch}")
                valkey.zero()
                run()
                found.setdefault(label, {})[hooked] = valkey.counted() / jobs
                clean()
        conn.close()
    return {label: (v[True], v[False]) for label, v in found.items()}
