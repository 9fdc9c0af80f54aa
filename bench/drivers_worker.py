"""One archive driver process for ``bench_drivers``: ready, then ``fold_declared`` in a
loop until told to stop; prints its totals as one JSON line.

    python bench/drivers_worker.py SPEC_JSON   (url, prefix, floor, remote, name,
    slice_count, go_file, stop_file)
"""

from __future__ import annotations

import json
import os
import sys
import time

from echomq.archive import Driver, S3Remote
from echomq.queue.connection import connect


def main() -> None:
    spec = json.loads(sys.argv[1])
    conn = connect(spec["url"], prefix=spec["prefix"])
    driver = Driver(conn, spec["floor"], S3Remote(**spec["remote"]),
                    slice_count=spec["slice_count"], lease_ms=10_000, name=spec["name"])
    driver.heartbeat()  # counted before anyone folds: nobody takes every queue at first
    print("ready", flush=True)
    sent = time.monotonic()
    while not os.path.exists(spec["go_file"]):  # keep counted while the others start
        if time.monotonic() - sent > 1:
            driver.heartbeat()
            sent = time.monotonic()
        time.sleep(0.005)
    totals = {"entries": 0, "pulled": 0, "uploaded": 0, "queues": set(), "busy_s": 0.0}
    while not os.path.exists(spec["stop_file"]):
        started = time.perf_counter()
        reports = driver.fold_declared()
        folded = [r for r in reports.values() if r.skipped is None and r.error is None]
        for report in folded:
            totals["entries"] += report.entries
            totals["pulled"] += report.pulled
            totals["uploaded"] += report.uploaded
            if report.entries:
                totals["queues"].add(report.queue)  # type: ignore[attr-defined]
        if any(r.entries for r in folded):
            totals["busy_s"] += time.perf_counter() - started
        else:
            time.sleep(0.02)
    driver.close()
    totals["queues"] = len(totals["queues"])  # type: ignore[arg-type]
    print(json.dumps(totals), flush=True)


if __name__ == "__main__":
    main()
