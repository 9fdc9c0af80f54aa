"""Benchmark the dashboard on a queue of 1,000,000 jobs and a floor of as many outcomes
(not a test).

Records ``--jobs`` outcomes settled over the last week into the queue's stream and folds
them into a floor (``web_charts.fill_floor``), loads the queue with a bench-only Lua
bulk loader (rows and set members exactly as ``add`` and the settles leave them, 1,000
jobs a call, pipelined) and two days of chart buckets, then times every GET route of the
app through Starlette's test client (the app's whole handling: Redis and floor reads,
templates; no network), each with the queue and a job as its parameters, plus a deep
page, the dead letters and each chart range. Then the charts' own figures
(``web_charts``): a chart's data read from a week of buckets, the buckets' memory per
queue per day, and the settle scripts' server µs per job with the chart hook and
without. Medians of ``--runs`` (default 5), on private Valkeys.

    python bench/bench_web.py [--jobs 1000000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import web_charts
from rich.console import Console
from rich.table import Table
from starlette.routing import Route
from starlette.testclient import TestClient

from echomq.archive import Floor
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


def timed(web: TestClient, url: str, runs: int) -> tuple[float, float, int]:
    """GET ``url``: the first request's ms, the median of ``runs`` more, the status."""
    began = time.perf_counter()
    status = web.get(url).status_code
    first = (time.perf_counter() - began) * 1000
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        status = web.get(url).status_code
        samples.append((time.perf_counter() - began) * 1000)
    return first, statistics.median(samples), status


def every_page(app: Any, job: str, deep: int) -> dict[str, str]:
    """A URL for every GET route of ``app`` (path parameters filled, the queue and the
    job in the query string for the others: routes added later are timed too), and the
    variants worth their own line."""
    pages = {}
    for route in app.routes:
        if not isinstance(route, Route) or "GET" not in (route.methods or ()):
            continue
        path = route.path.replace("{queue}", QUEUE).replace("{job_id:path}", job)
        path = path.replace("{job_id}", job)
        if "{" in path:
            continue
        pages[route.path] = path if route.path != path else \
            f"{path}?queue={QUEUE}&job={job}"
    pages["/ (a week of charts)"] = "/?range=week"
    pages[f"/queue (pending, page {deep + 1:,})"] = f"/queue?queue={QUEUE}&page={deep}"
    pages["/queue (dead letters)"] = f"/queue?queue={QUEUE}&state=dead"
    for span in ("day", "week"):
        pages[f"/fragments/charts ({span})"] = f"/fragments/charts?queue={QUEUE}&range={span}"
    return pages


def rows(jobs: int = 1_000_000, runs: int = 5, console: Console | None = None
         ) -> list[tuple[str, str]]:
    say = console.print if console is not None else (lambda *a: None)
    with tempfile.TemporaryDirectory(prefix="emq-bench-web-") as folder:
        valkey = EmbeddedValkey(Path(folder) / "valkey").start()
        floor = Floor(Path(folder) / "floor", map_size=1 << 30)
        try:
            conn = connect(valkey.url)
            took = web_charts.fill_floor(conn, QUEUE, floor, jobs)
            say(f"recorded and folded {jobs:,} outcomes in {took:.1f}s")
            began = time.perf_counter()
            split = load(conn, jobs)
            say(f"loaded {jobs:,} jobs {split} in {time.perf_counter() - began:.1f}s")
            web_charts.fill_buckets(conn, QUEUE, days=2)  # older points: from the floor
            app = create_app(conn, floor=floor)
            web = TestClient(app)
            web.__enter__()  # one event loop thread for every request, as a server has
            began = time.perf_counter()
            while f'data-queue="{QUEUE}"' not in web.get("/").text:  # the scan finds it
                time.sleep(0.5)
            found_s = time.perf_counter() - began
            pages = every_page(app, f"j{jobs // 3}", split["pending"] // 50 // 2)
            search = f"/search?queue={QUEUE}&state=pending&payload=%22n%22%3A-1"
            pages["search by payload (1,000 rows scanned)"] = search
            label = f"dashboard ({jobs:,} jobs, {jobs:,} outcomes in the floor)"
            out = [(f"{label}: the overview lists the queue after (s)", f"{found_s:.1f}")]
            try:
                for name, url in pages.items():
                    first, median, status = timed(web, url, runs)
                    out.append((f"{label}: GET {name} (ms: median of {runs}; first)"
                                + ("" if status == 200 else f" [HTTP {status}]"),
                                f"{median:.1f}; {first:.1f}"))
                out += search_cost(conn, web, search, label)
            finally:
                web.__exit__(None, None, None)
            out += chart_rows(conn, runs)
        finally:
            floor.close()
            valkey.cleanup()
        try:
            out += settle_rows(Path(folder))
        except Exception as exc:  # the pages' figures stand without these
            out.append(("settle: the measure failed", f"{type(exc).__name__}: {exc}"[:80]))
    return out


def chart_rows(conn: Connection, runs: int) -> list[tuple[str, str]]:
    """A chart's data from a full week of buckets, and their memory."""
    written = web_charts.fill_buckets(conn, "charted", days=8)
    out = []
    for span in ("hour", "day", "week"):
        wall, cpu, server = web_charts.read_ms(conn, "charted", span, runs * 4)
        out.append((f"chart data from the buckets, last {span} (ms, median of {runs * 4}: "
                    "wall; client CPU; server)", f"{wall:.1f}; {cpu:.1f}; {server:.1f}"))
    size = web_charts.bucket_memory(conn, "charted")
    out += [("chart buckets: bytes of one minute / 15-min / 2-hour hash (MEMORY USAGE)",
             f"{size['m']} / {size['q']} / {size['h']}"),
            ("chart buckets: bytes a queue busy every minute writes per day",
             f"{size['per_day']:,}"),
            ("chart buckets: bytes such a queue keeps (minutes 2 h, the rest 8 days)",
             f"{size['kept']:,}  ({sum(written.values()):,} keys written)")]
    return out


def settle_rows(folder: Path) -> list[tuple[str, str]]:
    """The settle scripts' server µs per job with the chart hook and without it."""
    valkey = EmbeddedValkey(folder / "valkey-settle").start()
    try:
        conn = connect(valkey.url)
        costs = web_charts.settle_cost(conn)
    finally:
        valkey.cleanup()
    out = [(f"settle: {label}, server µs/job with the chart hook / without (+%)",
            f"{on:.2f} / {off:.2f} ({(on / off - 1) * 100:+.1f}%)")
           for label, (on, off) in costs.items()]
    counted = web_charts.settle_instructions()
    if counted is None:
        return [*out, ("settle: server instructions (valgrind is not installed)", "-")]
    return out + [(f"settle: {label}, server instructions/job with the hook / without (+%)",
                   f"{on:,.0f} / {off:,.0f} ({(on / off - 1) * 100:+.1f}%)")
                  for label, (on, off) in counted.items()]


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
