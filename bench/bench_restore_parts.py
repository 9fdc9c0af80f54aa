"""Where a restore's time goes, per entry, part by part (not a test).

A queue is folded into the local SeaweedFS S3 endpoint once; then the same slices go
through each step of a restore on their own: the download (boto3 ``GetObject``), the
decode (gunzip, both checksums, the JSON of every line and the per-entry checks), the
index rows, and the floor commit (LMDB's puts and its synced commit, the rows excluded);
and a whole restore for reference, whose downloads and decodes overlap the commits. The
fold's figures (``bench_fold_parts.py``) are the ones to compare with: a restore is at
least as fast as the fold when its download and decode cost no more than the fold's read
and canonical lines. Each figure is the median of ``--runs`` in microseconds per entry,
on private servers started here, with cyclic GC paused as the restore pauses it.

    python bench/bench_restore_parts.py [--entries 100000] [--runs 3] [--slice-count 10000]
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench_archive import folded_bucket
from bench_fold_parts import parts_main, step_rows

from echomq.archive import Floor, restore
from echomq.archive.floor_rows import index_rows
from echomq.archive.floor_state import queue_key
from echomq.archive.quiet_gc import quiet_gc
from echomq.archive.s3_remote import S3Remote
from echomq.archive.slices import decode_slice

PARTS = ("download", "decode", "index rows", "floor commit", "whole restore")


def _timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def one_run(remote: S3Remote, queue: str, work: Path, entries: int) -> dict[str, float]:
    took = dict.fromkeys(PARTS, 0.0)
    refs = remote.list_slices(queue)
    blobs = []
    for ref in refs:
        spent, data = _timed(lambda ref=ref: remote._get_bytes(ref.name))
        took["download"] += spent
        blobs.append((ref, data))
    qk = queue_key(queue)
    with Floor(work / f"parts-{uuid.uuid4().hex[:8]}", map_size=1 << 30) as floor:
        for ref, data in blobs:  # one slice at a time, dropped after, as a restore does
            spent, content = _timed(lambda ref=ref, data=data: decode_slice(data, ref))
            took["decode"] += spent
            with quiet_gc():  # as in the restore's commits
                took["index rows"] += _timed(lambda c=content: index_rows(qk, c.items))[0]
                took["floor commit"] += _timed(lambda c=content: floor.commit_slices(
                    [c], uploaded=True))[0]
            del content
    took["floor commit"] -= took["index rows"]  # the commit builds the rows itself
    del blobs
    with Floor(work / f"whole-{uuid.uuid4().hex[:8]}", map_size=1 << 30) as floor:
        took["whole restore"] = _timed(
            lambda: restore(remote, floor, [queue], progress=False))[0]
    return {part: seconds / entries * 1e6 for part, seconds in took.items()}


def rows(entries: int = 100_000, runs: int = 3, slice_count: int = 10_000
         ) -> list[tuple[str, str]]:
    """The table's rows: each part's median in µs per entry, and its share of the sum."""
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as folder:
        work = Path(folder)
        with folded_bucket(work, entries, slice_count) as (_, remote, queue, folded):
            results = [one_run(remote, queue, work, folded) for _ in range(runs)]
    label = f"restore parts ({entries:,} outcomes, slices of {slice_count:,})"
    med, out = step_rows(label, results, PARTS)
    out.append((f"{label}: whole restore from SeaweedFS S3 (µs/entry; entries/s)",
                f"{med['whole restore']:.2f} ({1e6 / med['whole restore']:,.0f}/s)"))
    return out


if __name__ == "__main__":
    parts_main(rows, __doc__)
