"""Benchmark drain and obliterate of 1,000,000 jobs (not a test).

The queue holds 800,000 plain pending jobs, 100,000 grouped ones (1,000 groups of 100)
and 100,000 scheduled ones. Measures, per executor: the wall time of the whole verb, how
many Lua calls it made, the most one call removed, and the longest single call as the
server timed it (SLOWLOG, every command logged during the run) and as the client saw it
(a round trip), and the server's CPU time per call (which, unlike the wall-clock figures,
other processes on the same cores do not inflate). A private server is started and
stopped here.

    python bench/bench_bulk.py [--jobs 1000000] [--executor scripts|functions|both]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.table import Table

import echomq
from echomq.queue.bulk import drain_batches, obliterate_batches
from echomq.queue.connection import Connection, connect
from echomq.servers.valkey import EmbeddedValkey

QUEUE = "bulk"
LUA = ("evalsha", "fcall")
SLOW_US = 1000


def fill(conn: Connection, jobs: int) -> None:
    """8/10 plain, 1/10 grouped (groups of 100), 1/10 scheduled; 1,000 per add call."""
    plain, grouped = jobs * 8 // 10, jobs // 10
    scheduled = jobs - plain - grouped
    for start in range(0, plain, 1000):
        echomq.add_many(conn, QUEUE, [{"n": i} for i in range(start, min(plain, start + 1000))])
    for g in range(grouped // 100):
        echomq.add_many(conn, QUEUE, [{"g": i} for i in range(100)], group=f"g{g}")
    for start in range(0, scheduled, 1000):
        echomq.add_many(conn, QUEUE, [{"s": i} for i in range(min(1000, scheduled - start))],
                        delay_ms=3_600_000)


def timed(conn: Connection, steps: Callable[[], Iterator[int]]) -> dict[str, float]:
    """Run every step of a batched verb; wall time, calls, the largest batch, the longest
    round trip, and the longest Lua call in SLOWLOG."""
    r = conn.redis
    r.slowlog_reset()
    cpu_before = _server_cpu(r)
    started = time.perf_counter()
    longest_trip = 0.0
    biggest = calls = total = 0
    last = started
    for removed in steps():
        now = time.perf_counter()
        longest_trip = max(longest_trip, now - last)
        last = now
        biggest, calls, total = max(biggest, removed), calls + 1, total + removed
    wall = time.perf_counter() - started
    cpu = _server_cpu(r) - cpu_before
    lua: list[Any] = [e for e in r.slowlog_get(100_000) if _name(e["command"]) in LUA]
    return {"wall_s": wall, "calls": calls, "removed": total, "biggest": biggest,
            "trip_ms": longest_trip * 1000,
            "server_ms": max(e["duration"] for e in lua) / 1000 if lua else SLOW_US / 1000,
            "slowlogged": len(lua), "cpu_ms_per_call": cpu * 1000 / calls,
            "load": os.getloadavg()[0]}


def _server_cpu(r: Any) -> float:
    """The server's CPU seconds so far (user + system): unlike wall time, not inflated
    when other processes share the cores."""
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _name(command: str | bytes) -> str:
    text = command.decode(errors="replace") if isinstance(command, bytes) else command
    return text.split(" ", 1)[0].lower()


def run(executor: str, jobs: int, console: Console) -> list[tuple[str, str]]:
    out = []
    with tempfile.TemporaryDirectory(prefix="emq-bench-bulk-") as folder:
        server = EmbeddedValkey(folder).start()
        try:
            conn = connect(server.url, executor=executor)  # type: ignore[arg-type]
            # every call over 1 ms (a script's own commands are logged too: a lower bar
            # would push the calls themselves out of the log)
            conn.redis.config_set("slowlog-log-slower-than", SLOW_US)
            conn.redis.config_set("slowlog-max-len", 100_000)
            for verb, steps in (
                ("drain", lambda: drain_batches(conn, QUEUE)),
                ("obliterate", lambda: obliterate_batches(conn, QUEUE, force=True)),
            ):
                started = time.perf_counter()
                fill(conn, jobs)
                console.print(f"{executor}: filled {jobs:,} jobs in "
                              f"{time.perf_counter() - started:.1f}s; {verb} ...")
                m = timed(conn, steps)
                console.print(f"  {m}")
                label = f"{verb} of {jobs:,} jobs ({executor})"
                out += [
                    (f"{label}: wall time; {'jobs' if verb == 'drain' else 'keys'}/s",
                     f"{m['wall_s']:.1f} s; {m['removed'] / m['wall_s']:,.0f}"),
                    (f"{label}: Lua calls; most removed by one call",
                     f"{m['calls']:,.0f}; {m['biggest']:,.0f}"),
                    (f"{label}: longest single Lua call, server (SLOWLOG) / round trip",
                     f"{m['server_ms']:.1f} ms / {m['trip_ms']:.1f} ms"),
                    (f"{label}: server CPU per call (mean); load average during the run",
                     f"{m['cpu_ms_per_call']:.2f} ms; {m['load']:.1f}"),
                ]
        finally:
            server.cleanup()
    return out


def rows(jobs: int = 1_000_000, executors: tuple[str, ...] = ("scripts", "functions"),
         console: Console | None = None) -> list[tuple[str, str]]:
    console = console or Console()
    return [row for executor in executors for row in run(executor, jobs, console)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--executor", choices=["scripts", "functions", "both"], default="both")
    args = parser.parse_args()
    executors = ("scripts", "functions") if args.executor == "both" else (args.executor,)
    console = Console()
    table = Table(title="drain and obliterate")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in rows(args.jobs, executors, console):
        table.add_row(name, value)
    console.print(table)


if __name__ == "__main__":
    main()
