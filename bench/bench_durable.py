"""Benchmark durable settles (not a test): end-to-end jobs/s of one Consumer with and
without ``durable_replicas=1`` (``WAIT 1`` after each settle round trip), on a primary
and its replica the bench starts and stops itself.

Runs alternate (plain, durable, plain, ...) so both see the same machine; prints the
median of ``--runs`` of each and their ratio.

    python bench/bench_durable.py [--jobs 20000] [--runs 3] [--executor scripts]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import echomq
from echomq.queue.connection import Connection, ExecutorName, connect
from echomq.servers.valkey import EmbeddedValkey, probe


def wait_in_sync(replica: EmbeddedValkey) -> None:
    client = probe(replica.host, replica.port)
    try:
        while client.info("replication").get("master_link_status") != "up":
            time.sleep(0.05)
    finally:
        client.close()


def one_run(conn: Connection, queue: str, jobs: int, durable: int) -> float:
    """Seconds for one Consumer to settle ``jobs`` added beforehand."""
    for start in range(0, jobs, 1000):
        echomq.add_many(conn, queue, [{"n": i} for i in range(start, min(jobs, start + 1000))])
    consumer = echomq.Consumer(conn, queue, lambda job: None, concurrency=8, poll_ms=20,
                               durable_replicas=durable, durable_timeout_ms=1000)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    started = time.perf_counter()
    thread.start()
    while consumer.processed < jobs:
        time.sleep(0.005)
    elapsed = time.perf_counter() - started
    consumer.stop()
    thread.join()
    if consumer.durable_shortfalls:
        raise SystemExit(f"{consumer.durable_shortfalls} settles fell short of a replica")
    return elapsed


def rows(jobs: int = 20_000, runs: int = 3, executor: ExecutorName = "scripts"
         ) -> list[tuple[str, str]]:
    rates: dict[int, list[float]] = {0: [], 1: []}
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as folder:
        primary = EmbeddedValkey(Path(folder) / "primary").start()
        replica = EmbeddedValkey(Path(folder) / "replica", extra_args=[
            "--replicaof", primary.host, str(primary.port)]).start()
        try:
            wait_in_sync(replica)
            conn = connect(primary.url, executor)
            for n in range(runs):
                for durable in (0, 1):
                    seconds = one_run(conn, f"durable-{durable}-{n}", jobs, durable)
                    rates[durable].append(jobs / seconds)
            conn.close()
        finally:
            replica.cleanup()
            primary.cleanup()
    plain, durable = statistics.median(rates[0]), statistics.median(rates[1])
    where = f"{jobs:,} jobs, 1 Consumer, primary + 1 replica, {executor}"
    return [(f"settles without WAIT ({where})", f"{plain:,.0f} jobs/s"),
            (f"durable settles, WAIT 1 ({where})", f"{durable:,.0f} jobs/s"),
            ("durable / plain", f"{durable / plain:.2f}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--executor", choices=["scripts", "functions"], default="scripts")
    args = parser.parse_args()
    for name, value in rows(args.jobs, args.runs, args.executor):
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
