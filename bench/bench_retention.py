"""Retention under a steady load (not a test): Redis memory stays bounded by the window.

On a private Valkey: a producer adds jobs at a steady rate, a Consumer completes them
(the queue is declared, so every outcome is recorded), and a BatchScheduler folds the
stream into an LMDB floor every few seconds. Phase 1 runs with no retention: finished
rows pile up in Redis. Phase 2 turns retention on (``set_retention(completed_age_ms=...)``,
applied by the same scheduler): the rows beyond the window, once folded, are forgotten,
and INFO used_memory levels off. Reported: bytes of Redis memory per job kept (rows
kept in Redis) at the end of each phase, and the memory at the middle and the end of
phase 2 (bounded: the two agree while the job count keeps growing).

    python bench/bench_retention.py [--rate 1000] [--seconds 20] [--age-s 5] [--fold-s 2]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import echomq
from echomq.archive import Driver, declare
from echomq.scheduling.scheduler import BatchScheduler
from echomq.servers.valkey import EmbeddedValkey

QUEUE = "bench-retention"
PAYLOAD = {"to": "someone@example.com", "subject": "x" * 80, "body": "y" * 120}


def produce(conn: echomq.Connection, rate: int, stop: threading.Event) -> None:
    """``rate`` jobs a second, in ten batches a second."""
    batch = max(1, rate // 10)
    started, sent = time.monotonic(), 0
    while not stop.is_set():
        echomq.add_many(conn, QUEUE, [PAYLOAD] * batch)
        sent += batch
        ahead = sent / rate - (time.monotonic() - started)
        if ahead > 0:
            stop.wait(ahead)


def used(conn: echomq.Connection) -> int:
    return int(conn.redis.info("memory")["used_memory"])


def phase(conn: echomq.Connection, seconds: float, samples: list[tuple[float, int, int]],
          t0: float) -> None:
    """Sample (time, used_memory, completed rows kept) every second for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(1)
        samples.append((time.monotonic() - t0, used(conn),
                        echomq.counts(conn, QUEUE).completed))


def run(rate: int, seconds: float, age_s: float, fold_s: float,
        console: Console | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="emq-bench-ret-") as folder, \
            EmbeddedValkey(Path(folder) / "valkey") as server:
        conn = echomq.connect(server.url)
        declare(conn, QUEUE)
        conn.redis.execute_command("MEMORY", "PURGE")
        baseline = used(conn)
        driver = Driver(conn, Path(folder) / "floor")
        declare(conn, QUEUE, archive=driver.floor)  # the floor trims and marks as the record
        consumer = echomq.Consumer(conn, QUEUE, lambda job: {"sent": True}, concurrency=8)
        worker = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
        stop = threading.Event()
        producer = threading.Thread(target=produce, args=(conn, rate, stop))
        batch = BatchScheduler(conn)
        batch.add_fold(driver.fold_declared, interval_ms=int(fold_s * 1000))
        samples: list[tuple[float, int, int]] = []
        t0 = time.monotonic()
        worker.start()
        producer.start()
        with batch:
            phase(conn, seconds, samples, t0)
            out["phase1"] = samples[-1]
            echomq.set_retention(conn, QUEUE, completed_age_ms=int(age_s * 1000))
            batch.add_retention(interval_ms=1000)
            phase(conn, seconds, samples, t0)
            stop.set()
            producer.join()
        consumer.stop()
        worker.join()
        driver.close()
        added = int(conn.redis.get(conn.keys(QUEUE).seq) or 0)
        out["added"] = added
        out["completed_total"] = echomq.metrics(conn, QUEUE)["completed"]
        out["phase2_mid"] = samples[len(samples) * 3 // 4 - 1]
        out["phase2_end"] = samples[-1]
        out["baseline"] = baseline
        out["samples"] = samples
        out["forgotten"] = sum(r.forgotten for r in batch.retained.values())
    if console is not None:
        for t, mem, kept in out["samples"]:
            console.print(f"t={t:5.1f}s used_memory={mem / 2**20:6.2f} MiB rows kept={kept:,}")
    return out


def rows(rate: int = 1000, seconds: float = 20, age_s: float = 5, fold_s: float = 2,
         console: Console | None = None) -> list[tuple[str, str]]:
    out = run(rate, seconds, age_s, fold_s, console)
    base = out["baseline"]

    def per_job(sample: tuple[float, int, int]) -> str:
        _, mem, kept = sample
        return (f"{(mem - base) / 2**20:,.2f} MiB for {kept:,} rows = "
                f"{(mem - base) / max(kept, 1):,.0f} B/job")

    label = f"retention ({rate:,} jobs/s, fold every {fold_s:g}s, window {age_s:g}s; one run)"
    _, mid, mid_kept = out["phase2_mid"]
    _, end, end_kept = out["phase2_end"]
    return [
        (f"{label}: no retention, after {seconds:g}s (used_memory over baseline)",
         per_job(out["phase1"])),
        (f"{label}: retention on, after another {seconds:g}s", per_job(out["phase2_end"])),
        (f"{label}: retention on, used_memory mid-phase / end (MiB)",
         f"{(mid - base) / 2**20:,.2f} ({mid_kept:,} rows) / "
         f"{(end - base) / 2**20:,.2f} ({end_kept:,} rows)"),
        (f"{label}: jobs completed in all", f"{out['completed_total']:,}"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--age-s", type=float, default=5)
    parser.add_argument("--fold-s", type=float, default=2)
    args = parser.parse_args()
    console = Console()
    table = Table(title="retention under a steady load")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in rows(args.rate, args.seconds, args.age_s, args.fold_s, console):
        table.add_row(name, value)
    console.print(table)


if __name__ == "__main__":
    main()
