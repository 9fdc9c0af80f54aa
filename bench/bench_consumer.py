"""Consumer throughput: 20 000 no-op jobs, enqueued in bulk, processed by one worker
process; beside it, in the same run, the ceiling: a minimal claim-like Lua script
pipelined in batches of 100. Medians of 3 runs, each on a fresh private Valkey."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import echomq
from echomq.servers.valkey import EmbeddedValkey

HERE = Path(__file__).resolve().parent
CEILING_LUA = """
local id = redis.call('ZPOPMIN', KEYS[1])[1]
if not id then return nil end
redis.call('ZADD', KEYS[2], ARGV[1], id)
return id
"""


def one_run(total: int, concurrency: int, prefetch: int | str) -> dict[str, float]:
    with EmbeddedValkey() as server:
        conn = echomq.connect(server.url)
        before = int(conn.redis.info("memory")["used_memory"])
        t0 = time.perf_counter()
        echomq.add_many(conn, "bench", [{"n": i} for i in range(total)])
        enqueue_s = time.perf_counter() - t0
        proc = subprocess.run(
            [sys.executable, str(HERE / "consumer_worker.py"), server.url, "bench", str(total),
             str(concurrency), str(prefetch)],
            capture_output=True, text=True, check=True,
        )
        worker = json.loads(proc.stdout.strip().splitlines()[-1])
        counts = echomq.counts(conn, "bench")
        assert counts.completed == total and counts.active == counts.pending == 0, counts
        after = int(conn.redis.info("memory")["used_memory"])
        ceiling = ceiling_rate(conn, total)
    return {
        "enqueue_per_s": total / enqueue_s,
        "process_per_s": total / worker["seconds"],
        "rss_mib": worker["rss_mib"],
        "bytes_per_job": (after - before) / total,
        "ceiling_per_s": ceiling,
    }


def ceiling_rate(conn: echomq.Connection, total: int) -> float:
    """Script calls per second for a minimal claim-like script, 100 per pipeline."""
    r = conn.redis
    pipe = r.pipeline(transaction=False)
    for i in range(total):
        pipe.zadd("ceiling:pending", {str(i): i})
    pipe.execute()
    sha = r.script_load(CEILING_LUA)
    t0 = time.perf_counter()
    for _ in range(0, total, 100):
        pipe = r.pipeline(transaction=False)
        for _ in range(100):
            pipe.evalsha(sha, 2, "ceiling:pending", "ceiling:active", 1)
        pipe.execute()
    return total / (time.perf_counter() - t0)


def main(runs: int = 3, total: int = 20_000) -> list[tuple[str, str]]:
    configs: list[tuple[int, int | str]] = [(8, "auto"), (8, 8)]
    rows: list[tuple[str, str]] = []
    for concurrency, prefetch in configs:
        results = [one_run(total, concurrency, prefetch) for _ in range(runs)]

        def med(name: str, results: list[dict[str, Any]] = results) -> float:
            return statistics.median(r[name] for r in results)

        label = f"consumer c={concurrency} prefetch={prefetch}"
        rows += [
            (f"{label}: enqueue (jobs/s)", f"{med('enqueue_per_s'):,.0f}"),
            (f"{label}: end to end (jobs/s)", f"{med('process_per_s'):,.0f}"),
            (f"{label}: ratio to the Lua ceiling",
             f"{med('process_per_s') / med('ceiling_per_s'):.2f}"),
            (f"{label}: worker RSS (MiB)", f"{med('rss_mib'):.0f}"),
            (f"{label}: Redis bytes per retained completed job", f"{med('bytes_per_job'):,.0f}"),
        ]
        rows.append(("ceiling: minimal claim-like Lua, pipelined x100 (calls/s)",
                     f"{med('ceiling_per_s'):,.0f}"))
    return rows


if __name__ == "__main__":
    for name, value in main():
        print(f"{name:70s} {value:>12s}")
