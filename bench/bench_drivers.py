"""Many archive drivers (not a test): fold entries/s per driver with 1, 2 and 3 driver
processes sharing the same 12 declared queues.

On a private Valkey and SeaweedFS: for each driver count, 12 fresh queues (a prefix of
their own) are filled with outcome entries, then N driver processes (each with its own
LMDB floor, all writing one bucket) run ``fold_declared`` in a loop until every stream is
folded and trimmed. Reported per driver count: the total entries/s (wall time from the
start signal until every stream is empty), the same divided by N (per driver), and how
the entries split between the drivers. The drivers start and announce themselves before
the signal, so imports and connections are not timed.

    python bench/bench_drivers.py [--entries 120000] [--slice-count 2000] [--drivers 1 2 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from echomq.archive import declare
from echomq.archive.s3_remote import S3Remote
from echomq.queue.connection import Connection, connect
from echomq.servers.seaweed import SeaweedS3
from echomq.servers.valkey import EmbeddedValkey

QUEUES = 12
WORKER = str(Path(__file__).with_name("drivers_worker.py"))


def fill(conn: Connection, queue: str, entries: int) -> None:
    """``entries`` outcome entries as the queue's Lua records them (pipelined XADD)."""
    key = conn.keys(queue).completions
    now = int(time.time() * 1000)
    for start in range(0, entries, 5_000):
        pipe = conn.redis.pipeline(transaction=False)
        for i in range(start, min(start + 5_000, entries)):
            pipe.xadd(key, {"job": uuid.uuid4().hex[:20], "outcome": "completed",
                            "result": json.dumps({"ok": True, "n": i}), "attempts": "1",
                            "at": str(now + i), "created_at": str(now - 5_000 + i)})
        pipe.execute()


def one_run(url: str, weed: SeaweedS3, work: Path, drivers: int, entries: int,
            slice_count: int) -> dict[str, Any]:
    prefix = f"bd{uuid.uuid4().hex[:6]}"
    conn = connect(url, prefix=prefix)
    queues = [f"q{i:02d}" for i in range(QUEUES)]
    for queue in queues:
        declare(conn, queue)
        fill(conn, queue, entries // QUEUES)
    remote = S3Remote.from_endpoint(weed.endpoint(f"bench-{prefix}"), "archive/",
                                    create_bucket=True)
    run = work / prefix
    run.mkdir()
    procs = []
    for n in range(drivers):
        spec = {"url": url, "prefix": prefix, "floor": str(run / f"floor-{n}"),
                "remote": {"bucket": remote.bucket, "prefix": remote.prefix,
                           "endpoint_url": weed.endpoint_url, "region": "us-east-1",
                           "aws_access_key_id": weed.access_key,
                           "aws_secret_access_key": weed.secret_key},
                "name": f"d{n}", "slice_count": slice_count,
                "go_file": str(run / "go"), "stop_file": str(run / "stop")}
        procs.append(subprocess.Popen([sys.executable, WORKER, json.dumps(spec)],
                                      stdout=subprocess.PIPE, text=True))
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    started = time.perf_counter()
    (run / "go").touch()
    while any(conn.redis.xlen(conn.keys(q).completions) for q in queues):
        time.sleep(0.01)
    seconds = time.perf_counter() - started
    (run / "stop").touch()
    totals = [json.loads(proc.communicate(timeout=120)[0].strip().splitlines()[-1])
              for proc in procs]
    conn.close()
    total = sum(t["entries"] for t in totals)
    return {"drivers": drivers, "entries": total, "seconds": seconds,
            "rate": total / seconds, "per_driver": total / seconds / drivers,
            "split": [t["entries"] for t in totals], "pulled": sum(t["pulled"] for t in totals),
            "queues": [t["queues"] for t in totals]}


def measure(counts: tuple[int, ...] = (1, 2, 3), entries: int = 120_000,
            slice_count: int = 2_000, console: Console | None = None) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="emq-bench-drivers-") as folder:
        work = Path(folder)
        valkey = EmbeddedValkey(work / "valkey").start()
        weed = SeaweedS3(work / "weed").start()
        try:
            for drivers in counts:
                results.append(one_run(valkey.url, weed, work, drivers, entries, slice_count))
                if console is not None:
                    console.print(results[-1])
        finally:
            weed.cleanup()
            valkey.cleanup()
    return results


def rows(entries: int = 120_000, slice_count: int = 2_000) -> list[tuple[str, str]]:
    """The table's rows for ``bench/run.py drivers``."""
    out = []
    for r in measure(entries=entries, slice_count=slice_count):
        label = (f"drivers: {r['drivers']} over {QUEUES} queues, {r['entries']:,} entries, "
                 f"floor + SeaweedFS")
        out.append((f"{label}: total / per driver (entries/s)",
                    f"{r['rate']:,.0f} / {r['per_driver']:,.0f}"))
        out.append((f"{label}: entries per driver; slices pulled",
                    f"{' + '.join(f'{n:,}' for n in r['split'])}; {r['pulled']}"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=120_000)
    parser.add_argument("--slice-count", type=int, default=2_000)
    parser.add_argument("--drivers", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    console = Console()
    results = measure(tuple(args.drivers), args.entries, args.slice_count, console)
    table = Table(title=f"archive drivers over {QUEUES} queues (one run each; 2 cores)")
    for column in ("drivers", "entries", "seconds", "total entries/s", "per driver",
                   "split", "slices pulled"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(str(r["drivers"]), f"{r['entries']:,}", f"{r['seconds']:.2f}",
                      f"{r['rate']:,.0f}", f"{r['per_driver']:,.0f}",
                      " + ".join(f"{n:,}" for n in r["split"]), str(r["pulled"]))
    console.print(table)


if __name__ == "__main__":
    main()
