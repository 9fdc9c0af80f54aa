"""Benchmark the archive on 200 000 recorded outcomes (not a test).

Measures, median of ``--runs`` (default 3): the fold rate into the floor alone, the fold
rate with the local SeaweedFS S3 endpoint, the restore rate from it, the floor's size per
entry, the floor-only rate again without the C accelerator (the Python path) and with the
queue's default job ids (a counter: the job
index then appends, where random custom ids scatter it), and Redis memory (INFO
used_memory, MEMORY USAGE of the stream) before and after the trim. Everything runs on
private servers it starts and stops itself.

A raw LMDB baseline is measured in the same run: the very key/value pairs the fold wrote
(read back from its floor), in the order the fold wrote them (stream order: every index
key ends with the entry's 16-byte id), put into a fresh environment with plain
``putmulti``, one transaction per slice. Each rate is also given as a ratio to it, which
says more than the bare rate on a shared, loaded machine.

    python bench/bench_archive.py [--entries 200000] [--runs 3] [--slice-count 10000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lmdb
from rich.console import Console
from rich.table import Table

from echomq.archive import Driver, Floor, accel, declare, restore
from echomq.archive.s3_remote import S3Remote
from echomq.queue.connection import connect
from echomq.queue.keys import Keys
from echomq.servers.seaweed import SeaweedS3
from echomq.servers.valkey import EmbeddedValkey

OUTCOMES = ("completed", "cancelled", "dead")


def fill(conn: object, queue: str, entries: int, *, counted_ids: bool = False) -> None:
    """Record ``entries`` outcomes the way the queue's Lua does (XADD, pipelined).

    Job ids are random (custom ids, the job index's worst case: every key lands on a
    page of its own), or with ``counted_ids`` the queue's own default, a counter."""
    r = conn.redis  # type: ignore[attr-defined]
    key = Keys(queue).completions
    now = int(time.time() * 1000)
    batch = 10_000
    for start in range(0, entries, batch):
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(start + batch, entries)):
            outcome = OUTCOMES[i % 3]
            result = json.dumps({"ok": True, "n": i}) if outcome == "completed" else (
                f"reason {i % 17}" if outcome == "cancelled" else "TimeoutError: upstream")
            job = str(i + 1) if counted_ids else uuid.uuid4().hex[:20]
            pipe.xadd(key, {"job": job, "outcome": outcome,
                            "result": result, "attempts": str(1 + i % 3),
                            "at": str(now + i), "created_at": str(now - 5000 + i)})
        pipe.execute()


@contextmanager
def folded_bucket(work: Path, entries: int, slice_count: int = 10_000
                  ) -> Iterator[tuple[SeaweedS3, S3Remote, str, int]]:
    """Private Valkey and SeaweedFS servers in ``work``, with ``entries`` outcomes recorded
    and folded into bucket ``bench`` (the queue's name as prefix): the restore benches'
    starting point. Yields the S3 server, the remote, the queue and how many entries were
    folded; both servers are stopped on exit."""
    valkey = EmbeddedValkey(work / "valkey").start()
    weed = SeaweedS3(work / "weed").start()
    try:
        conn = connect(valkey.url)
        queue = f"bench-{uuid.uuid4().hex[:8]}"
        declare(conn, queue)
        fill(conn, queue, entries)
        remote = S3Remote.from_endpoint(weed.endpoint("bench"), queue, create_bucket=True)
        with Floor(work / "folded", map_size=1 << 30) as floor:
            folded = Driver(conn, floor, remote, slice_count=slice_count).fold(queue)
        conn.close()
        yield weed, remote, queue, folded.entries
    finally:
        weed.cleanup()
        valkey.cleanup()


def memory(conn: object, queue: str) -> tuple[int, int]:
    r = conn.redis  # type: ignore[attr-defined]
    stream = r.memory_usage(Keys(queue).completions, samples=0) or 0
    return int(r.info("memory")["used_memory"]), int(stream)


def raw_lmdb_rate(floor: Floor, work: Path, entries: int, slices: int) -> float:
    """Entries/s of bare LMDB writing what the fold wrote: every sub-database's pairs, in
    ``slices`` transactions of equal shares, into a fresh environment."""
    with floor.env.begin() as txn:
        tables = {name: list(txn.cursor(db=db)) for name, db in floor.store.dbs.items()}
    for name, pairs in tables.items():  # the fold's order: an index key ends with the id
        if name.startswith("by_"):
            pairs.sort(key=lambda pair: pair[0][-16:])
    env = lmdb.open(str(work / f"raw-{uuid.uuid4().hex[:8]}"), map_size=1 << 30,
                    max_dbs=len(tables))
    dbs = {name: env.open_db(name.encode()) for name in tables}
    chunks = {name: -(-len(pairs) // slices) or 1 for name, pairs in tables.items()}
    started = time.perf_counter()
    for n in range(slices):
        with env.begin(write=True) as txn:
            for name, pairs in tables.items():
                part = pairs[n * chunks[name]:(n + 1) * chunks[name]]
                if part:
                    txn.cursor(db=dbs[name]).putmulti(part)
    rate = entries / (time.perf_counter() - started)
    env.close()
    return rate


@contextmanager
def python_path() -> Iterator[None]:
    """The fold without its C accelerator, as where none was built."""
    built, accel.FOLD = accel.FOLD, None
    try:
        yield
    finally:
        accel.FOLD = built


def one_run(conn: object, work: Path, weed: SeaweedS3, entries: int, slice_count: int
            ) -> dict[str, float]:
    out: dict[str, float] = {}
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    declare(conn, queue)
    fill(conn, queue, entries)
    conn.redis.execute_command("MEMORY", "PURGE")  # type: ignore[attr-defined]
    out["used_before"], out["stream_before"] = memory(conn, queue)
    with Floor(work / f"floor-{queue}", map_size=1 << 30) as floor:
        declare(conn, queue, archive=floor)  # a floor alone trims as the declared record
        started = time.perf_counter()
        report = Driver(conn, floor, slice_count=slice_count).fold(queue)
        out["floor_rate"] = report.entries / (time.perf_counter() - started)
        out["floor_bytes_per_entry"] = floor.size_bytes() / report.entries
        out["raw_rate"] = raw_lmdb_rate(floor, work, report.entries, report.slices)
    conn.redis.execute_command("MEMORY", "PURGE")  # type: ignore[attr-defined]
    out["used_after"], out["stream_after"] = memory(conn, queue)

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    declare(conn, queue)
    fill(conn, queue, entries)
    with Floor(work / f"floor-{queue}", map_size=1 << 30) as floor, python_path():
        declare(conn, queue, archive=floor)
        started = time.perf_counter()
        report = Driver(conn, floor, slice_count=slice_count).fold(queue)
        out["python_rate"] = report.entries / (time.perf_counter() - started)

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    declare(conn, queue)
    fill(conn, queue, entries, counted_ids=True)
    with Floor(work / f"floor-{queue}", map_size=1 << 30) as floor:
        declare(conn, queue, archive=floor)  # a floor alone trims as the declared record
        started = time.perf_counter()
        report = Driver(conn, floor, slice_count=slice_count).fold(queue)
        out["counted_rate"] = report.entries / (time.perf_counter() - started)

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    declare(conn, queue)
    fill(conn, queue, entries)
    remote = S3Remote.from_endpoint(weed.endpoint("bench"), queue, create_bucket=True)
    with Floor(work / f"floor-{queue}", map_size=1 << 30) as floor:
        started = time.perf_counter()
        report = Driver(conn, floor, remote, slice_count=slice_count).fold(queue)
        out["s3_rate"] = report.entries / (time.perf_counter() - started)
    started = time.perf_counter()
    with Floor(work / f"restored-{queue}", map_size=1 << 30) as floor:
        restored = restore(remote, floor, [queue], progress=False)[queue]
    out["restore_rate"] = (restored.entries + restored.quarantined) / (
        time.perf_counter() - started)
    return out


def rows(entries: int = 200_000, runs: int = 3, slice_count: int = 10_000,
         console: Console | None = None) -> list[tuple[str, str]]:
    """Run the archive benchmark ``runs`` times on private servers; the table's rows."""
    results = []
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as folder:
        work = Path(folder)
        valkey = EmbeddedValkey(work / "valkey").start()
        weed = SeaweedS3(work / "weed").start()
        try:
            conn = connect(valkey.url)
            for n in range(runs):
                results.append(one_run(conn, work, weed, entries, slice_count))
                if console is not None:
                    console.print(f"run {n + 1}: " + ", ".join(
                        f"{k}={v:,.0f}" for k, v in results[-1].items()))
        finally:
            weed.cleanup()
            valkey.cleanup()

    def med(name: str) -> float:
        return statistics.median(r[name] for r in results)

    def ratio(name: str) -> str:
        return f"{statistics.median(r[name] / r['raw_rate'] for r in results):.2f}"

    label = f"archive ({entries:,} outcomes, slices of {slice_count:,})"
    return [
        (f"{label}: raw LMDB baseline, the fold's pairs, a txn per slice (entries/s)",
         f"{med('raw_rate'):,.0f}"),
        (f"{label}: fold, floor only (entries/s; target >= 150,000; ratio to raw LMDB)",
         f"{med('floor_rate'):,.0f} ({ratio('floor_rate')})"),
        (f"{label}: fold, floor only, the Python path (no C accelerator; entries/s; ratio)",
         f"{med('python_rate'):,.0f} ({ratio('python_rate')})"),
        (f"{label}: fold, floor only, the queue's own counted job ids (entries/s; ratio)",
         f"{med('counted_rate'):,.0f} ({ratio('counted_rate')})"),
        (f"{label}: fold, floor + SeaweedFS S3 (entries/s; target >= 100,000; ratio)",
         f"{med('s3_rate'):,.0f} ({ratio('s3_rate')})"),
        (f"{label}: restore from SeaweedFS S3 (entries/s; ratio to raw LMDB)",
         f"{med('restore_rate'):,.0f} ({ratio('restore_rate')})"),
        (f"{label}: floor size per entry (B)", f"{med('floor_bytes_per_entry'):,.0f}"),
        (f"{label}: Redis used_memory before / after trim (MiB)",
         f"{med('used_before') / 2**20:,.1f} / {med('used_after') / 2**20:,.1f}"),
        (f"{label}: stream MEMORY USAGE before / after",
         f"{med('stream_before') / 2**20:,.1f} MiB / {med('stream_after'):,.0f} B"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slice-count", type=int, default=10_000)
    args = parser.parse_args()
    console = Console()
    table = Table(title=f"median of {args.runs}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in rows(args.entries, args.runs, args.slice_count, console):
        table.add_row(name, value)
    console.print(table)


if __name__ == "__main__":
    main()
