"""Where a fold's time goes, per entry, part by part (not a test).

The same slices go through each step of the floor-only fold on their own: the ``XRANGE``
read in pages of ``stream_read.PAGE`` (the server's work, the socket, hiredis; a page at a
time here, where the fold asks for the next page before it takes the one in hand, so the
server's part overlaps its own), the fields and canonical lines (``stream_read.take``),
the index rows, and the floor commit (LMDB's puts and its synced commit, the rows
excluded); then the same pairs into a bare LMDB environment, and a whole
fold for reference. Each figure is the median of ``--runs`` in microseconds per entry, on
private servers started here, with cyclic GC paused as the fold pauses it. The lines and
the index rows run in C when the accelerator is built (``ECHOMQ_PURE_PYTHON=1`` measures
the Python path).

    python bench/bench_fold_parts.py [--entries 100000] [--runs 3] [--slice-count 10000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import redis
from bench_archive import fill
from rich.console import Console
from rich.table import Table

from echomq.archive import Driver, Floor, declare
from echomq.archive.floor_rows import index_rows
from echomq.archive.floor_state import queue_key
from echomq.archive.quiet_gc import quiet_gc
from echomq.archive.slices import RawItem, SliceContent, build_slice
from echomq.archive.stream_read import PAGE, take
from echomq.queue.connection import connect
from echomq.servers.valkey import EmbeddedValkey

PARTS = ("read", "lines", "index rows", "floor commit", "bare LMDB", "whole fold")


def _timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def one_run(url: str, work: Path, entries: int, slice_count: int) -> dict[str, float]:
    with quiet_gc():  # as in the fold: no cyclic GC passes over the slices in memory
        return _one_run(url, work, entries, slice_count)


def _one_run(url: str, work: Path, entries: int, slice_count: int) -> dict[str, float]:
    conn = connect(url)
    fast = redis.Redis.from_url(url, decode_responses=True)
    fast.set_response_callback("XRANGE", lambda reply, **_: reply)
    queue = f"parts-{uuid.uuid4().hex[:8]}"
    declare(conn, queue)
    fill(conn, queue, entries)
    stream = conn.keys(queue).completions
    took = dict.fromkeys(PARTS, 0.0)

    replies, after = [], "0-0"  # per slice: pages of PAGE entries, as the fold reads
    while True:
        pages: list[Any] = []
        while sum(map(len, pages)) < slice_count:
            last = pages[-1][-1][0] if pages else after
            spent, page = _timed(lambda last=last: fast.execute_command(
                "XRANGE", stream, f"({last}", "+", "COUNT", PAGE))
            took["read"] += spent
            if not page:
                break
            pages.append(page)
        if not pages:
            break
        replies.append((after, pages))
        after = pages[-1][-1][0]

    def lines(pages: list[Any]) -> list[RawItem]:
        items: list[RawItem] = []
        for page in pages:
            take(page, items, 0, 1 << 40)
        return items

    slices: list[SliceContent] = []
    for prev, pages in replies:
        spent, items = _timed(lambda pages=pages: lines(pages))
        took["lines"] += spent
        slices.append(build_slice(queue, prev, items, encode=False))
    qk = queue_key(queue)
    took["index rows"] = sum(_timed(lambda s=s: index_rows(qk, s.items))[0] for s in slices)
    with Floor(work / f"floor-{queue}", map_size=1 << 30) as floor:
        for content in slices:
            took["floor commit"] += _timed(lambda c=content: floor.commit_slice(
                c, uploaded=False, keep_bytes=False))[0]
    took["floor commit"] -= took["index rows"]  # commit_slice builds the rows itself
    rows = [index_rows(qk, s.items) for s in slices]
    env = lmdb.open(str(work / f"bare-{queue}"), map_size=1 << 30, max_dbs=16)
    dbs = {name: env.open_db(name.encode()) for name in rows[0]}
    started = time.perf_counter()
    for per_db in rows:
        with env.begin(write=True) as txn:
            for name, pairs in per_db.items():
                if pairs:
                    txn.cursor(db=dbs[name]).putmulti(pairs)
    took["bare LMDB"] = time.perf_counter() - started
    env.close()

    again = f"parts-{uuid.uuid4().hex[:8]}"
    declare(conn, again)
    fill(conn, again, entries)
    with Floor(work / f"floor-{again}", map_size=1 << 30) as floor:
        declare(conn, again, archive=floor)  # a floor alone trims as the declared record
        took["whole fold"] = _timed(
            lambda: Driver(conn, floor, slice_count=slice_count).fold(again))[0]
    conn.close()
    fast.close()
    return {part: seconds / entries * 1e6 for part, seconds in took.items()}


def rows(entries: int = 100_000, runs: int = 3, slice_count: int = 10_000
         ) -> list[tuple[str, str]]:
    """The table's rows: each part's median in µs per entry, and its share of the sum."""
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as folder:
        work = Path(folder)
        valkey = EmbeddedValkey(work / "valkey").start()
        try:
            results = [one_run(valkey.url, work, entries, slice_count) for _ in range(runs)]
        finally:
            valkey.cleanup()
    label = f"fold parts ({entries:,} outcomes, slices of {slice_count:,})"
    med, out = step_rows(label, results, PARTS)
    out.append((f"{label}: bare LMDB, the same pairs (µs/entry)", f"{med['bare LMDB']:.2f}"))
    out.append((f"{label}: whole fold, for reference (µs/entry; entries/s)",
                f"{med['whole fold']:.2f} ({1e6 / med['whole fold']:,.0f}/s)"))
    return out


def step_rows(label: str, results: list[dict[str, float]], parts: tuple[str, ...]
              ) -> tuple[dict[str, float], list[tuple[str, str]]]:
    """Each part's median over ``results``, and the rows of a parts table: the first four
    parts (the steps) with their share of the sum, then the four together."""
    med = {part: statistics.median(r[part] for r in results) for part in parts}
    steps = sum(med[p] for p in parts[:4])
    out = [(f"{label}: {part} (µs/entry; share of the four steps)",
            f"{med[part]:.2f} ({med[part] / steps:.0%})") for part in parts[:4]]
    out.append((f"{label}: the four steps together (µs/entry; entries/s)",
                f"{steps:.2f} ({1e6 / steps:,.0f}/s)"))
    return med, out


def parts_main(rows: Callable[[int, int, int], list[tuple[str, str]]], doc: str) -> None:
    """The command line of a parts bench: ``--entries``, ``--runs``, ``--slice-count``,
    then its rows as one table."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slice-count", type=int, default=10_000)
    args = parser.parse_args()
    table = Table(title=f"median of {args.runs}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in rows(args.entries, args.runs, args.slice_count):
        table.add_row(name, value)
    Console().print(table)


if __name__ == "__main__":
    parts_main(rows, __doc__)
