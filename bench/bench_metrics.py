"""Benchmark one Prometheus scrape (not a test): ``echomq.prometheus.render`` over many queues
and one big one, on a private Valkey it starts and stops itself.

Each small queue holds jobs in every state and a declared stream; the big queue holds
``--big`` pending jobs in several priority bands. Prints the median of ``--runs`` scrapes.

    python bench/bench_metrics.py [--queues 200] [--big 200000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import echomq
from echomq.archive import declare
from echomq.prometheus import render
from echomq.queue.connection import Connection, connect
from echomq.servers.valkey import EmbeddedValkey


def fill_small(conn: Connection, queue: str) -> None:
    declare(conn, queue)
    echomq.add_many(conn, queue, [{"n": i} for i in range(20)])
    echomq.add(conn, queue, {"n": "later"}, delay_ms=60_000)
    for n, job in enumerate(echomq.claim(conn, queue, count=10)):
        if n % 3:
            echomq.complete(conn, queue, job.id, job.token, "ok")
        else:
            echomq.fail(conn, queue, job.id, job.token, "boom")


def fill_big(conn: Connection, queue: str, jobs: int) -> None:
    for start in range(0, jobs, 1000):
        echomq.add_many(conn, queue, [{"n": i} for i in range(start, min(jobs, start + 1000))],
                        priority=start // 1000 % 4)


def rows(queues: int = 200, big: int = 200_000, runs: int = 5) -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as folder:
        valkey = EmbeddedValkey(Path(folder) / "valkey").start()
        try:
            conn = connect(valkey.url)
            for n in range(queues):
                fill_small(conn, f"small-{n}")
            fill_big(conn, "big", big)
            render(conn)  # the first scrape finishes the SCAN pass that finds the queues
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                body, _ = render(conn)
                times.append(time.perf_counter() - started)
            keys = conn.redis.dbsize()
            conn.close()
        finally:
            valkey.cleanup()
    return [(f"one scrape: {queues + 1} queues ({big:,} pending in one), {keys:,} keys",
             f"{statistics.median(times) * 1000:.0f} ms, {len(body):,} bytes")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queues", type=int, default=200)
    parser.add_argument("--big", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for name, value in rows(args.queues, args.big, args.runs):
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
