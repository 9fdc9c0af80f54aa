"""Benchmark the dashboard on a queue of 1,000,000 jobs (not a test).

Loads the queue with a bench-only Lua bulk loader (rows and set members exactly as
``add`` and the settles leave them, 1,000 jobs a call, pipelined), then times the
dashboard's pages through Starlette's test client (the app's whole handling: Redis
reads, templates; no network): the overview, the first and a deep page of pending jobs,
the dead letters and one job. Median of ``--runs`` (default 5), on a private Valkey.

    python bench/bench_web.py [--jobs 1000000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from starlette.testclient import TestClient

from echomq.queue.connection import Connection, connect
from echomq.servers.valkey import EmbeddedValkey
from echomq.web import create_app

QUEUE = "big"
CHUNK = 1000

LOADER = """
local base, first, n, now, state, set = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), ARGV[5], KEYS[1]
for i = first, first + n - 1 do
  local id = 'j' .. i
  redis.call('HSET', base .. 'job:' .. id, 'state', state, 'payload', '{"n":' .. i .. '}',
    'priority', '0', 'attempts', state == 'pending' and '0' or '1', 'max_attempts', '3',
    'stalled', '0', 'seq', i, 'created_at', now - 60000 + i % 60000)
  if state == 'pending' then
    redis.call('ZADD', set, i, id)
  else
    local at = now - (i % 900000)
    redis.call('HSET', base .. 'job:' .. id, 'finished_at', at)
    if state == 'dead' then redis.call('HSET', base .. 'job:' .. id, 'last_error', 'boom') end
    redis.call('ZADD', set, at, id)
  end
end
return n
"""


def load(conn: Connection, jobs: int) -> dict[str, int]:
    """``jobs`` jobs: 94.5% pending, 5% completed, 0.5% dead (finished over 15 minutes)."""
    keys = conn.keys(QUEUE)
    seconds, micros = conn.redis.time()
    now = int(seconds) * 1000 + int(micros) // 1000
    split = {"completed": jobs // 20, "dead": jobs // 200}
    split["pending"] = jobs - split["completed"] - split["dead"]
    script = conn.redis.register_script(LOADER)
    first = 0
    for state, count in split.items():
        target = getattr(keys, state)
        for start in range(0, count, CHUNK * 10):
            pipe = conn.redis.pipeline(transaction=False)
            for chunk in range(start, min(start + CHUNK * 10, count), CHUNK):
                n = min(CHUNK, count - chunk)
                script(keys=[target], args=[keys.base, first + chunk, n, now, state],
                       client=pipe)
            pipe.execute()
        first += count
    return split


def timed(web: TestClient, url: str, runs: int) -> float:
    """The median time of GET ``url``, in ms (one warm-up first)."""
    assert web.get(url).status_code == 200, url
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        response = web.get(url)
        samples.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, url
    return statistics.median(samples)


def rows(jobs: int = 1_000_000, runs: int = 5, console: Console | None = None
         ) -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="emq-bench-web-") as folder:
        valkey = EmbeddedValkey(Path(folder) / "valkey").start()
        try:
            conn = connect(valkey.url)
            began = time.perf_counter()
            split = load(conn, jobs)
            if console is not None:
                console.print(f"loaded {jobs:,} jobs {split} in "
                              f"{time.perf_counter() - began:.1f}s")
            web = TestClient(create_app(conn))
            web.__enter__()  # one event loop thread for every request, as a server has
            began = time.perf_counter()
            while f'data-queue="{QUEUE}"' not in web.get("/").text:  # the scan finds it
                time.sleep(0.5)
            found_s = time.perf_counter() - began
            deep = split["pending"] // 50 // 2
            pages = {
                "overview": "/",
                "queue page (pending, newest 50)": f"/queues/{QUEUE}?state=pending",
                f"queue page (pending, page {deep + 1:,})":
                    f"/queues/{QUEUE}?state=pending&page={deep}",
                "dead letters (newest 50)": f"/queues/{QUEUE}?state=dead",
                "one job": f"/queues/{QUEUE}/jobs/j{jobs // 3}",
            }
            search = f"/search?queue={QUEUE}&state=pending&payload=%22n%22%3A-1"
            pages["search by payload (1,000 rows scanned)"] = search
            label = f"dashboard ({jobs:,} jobs in one queue)"
            try:
                return [(f"{label}: {name} (ms, median of {runs})",
                         f"{timed(web, url, runs):.1f}") for name, url in pages.items()] + [
                    (f"{label}: the overview lists the queue after (s)", f"{found_s:.1f}"),
                    *search_cost(conn, web, search, label)]
            finally:
                web.__exit__(None, None, None)
        finally:
            valkey.cleanup()


def search_cost(conn: Connection, web: TestClient, url: str, label: str
                ) -> list[tuple[str, str]]:
    """What one payload search request costs the server: the commands it sent, from
    ``INFO commandstats`` before and after (rows read are its ``HMGET`` calls)."""
    def calls() -> dict[str, int]:
        stats = conn.redis.info("commandstats")
        return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}

    before = calls()
    assert web.get(url).status_code == 200
    after = calls()
    sent = {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0)}
    sent.pop("info", None)
    return [(f"{label}: one payload search, rows read (HMGET)", str(sent.get("hmget", 0))),
            (f"{label}: one payload search, commands in all",
             f"{sum(sent.values())} ({', '.join(f'{k} {n}' for k, n in sorted(sent.items()))})")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    console = Console()
    table = Table(title="EchoMQ dashboard benchmark")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in rows(args.jobs, args.runs, console):
        table.add_row(name, value)
    console.print(table)


if __name__ == "__main__":
    main()
