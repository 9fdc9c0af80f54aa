"""Compaction: a quiet queue's many tiny objects, restored before and after ``compact``.

Folds ENTRIES outcomes in slices of 5 (what a fold every 30 s on a quiet queue makes) into
a private Valkey and SeaweedFS, then times a restore, the compaction, a restore of the
packs and a verify against the folding floor.

    python bench/bench_compact.py [ENTRIES]
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from pathlib import Path

from echomq.archive import Driver, compact, declare, restore, verify
from echomq.archive.s3_remote import S3Remote
from echomq.queue.connection import connect
from echomq.servers.seaweed import SeaweedS3
from echomq.servers.valkey import EmbeddedValkey

PER_SLICE = 5


def main(entries: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="emq-bench-compact-"))
    with EmbeddedValkey(tmp / "valkey") as valkey, SeaweedS3(tmp / "weed") as weed:
        valkey.start()
        weed.start()
        conn = connect(valkey.url)
        queue = "c" + uuid.uuid4().hex[:6]
        declare(conn, queue)
        remote = S3Remote.from_endpoint(weed.endpoint("b" + uuid.uuid4().hex[:8]), "archive/",
                                        create_bucket=True)
        pipe = conn.redis.pipeline(transaction=False)
        for i in range(entries):
            pipe.xadd(conn.keys(queue).completions, {
                "job": f"j{i}", "outcome": "completed", "result": "{}", "attempts": "1",
                "at": str(1_700_000_000_000 + i), "created_at": "1700000000000"})
        pipe.execute()
        driver = Driver(conn, tmp / "floor", remote, slice_count=PER_SLICE)
        driver.fold(queue)
        driver.close()
        objects = len(remote.list_slices(queue))
        timings = {}
        for name, step in (
            ("restore", lambda: restore(remote, tmp / "before", progress=False)),
            ("compact", lambda: compact(conn, remote, queue)),
            ("restore_packed", lambda: restore(remote, tmp / "after", progress=False)),
            ("verify_packed", lambda: verify(remote, progress=False, floor=tmp / "floor")),
        ):
            started = time.perf_counter()
            step()
            timings[name] = time.perf_counter() - started
        print(f"{entries} entries in {objects} objects -> {len(remote.list_slices(queue))}: "
              + ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
