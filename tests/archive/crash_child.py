"""A driver run in a child process, killed with SIGKILL at one named crash point.

Usage: python crash_child.py SPEC_JSON. SPEC: url, floor, queue, point, at (which
occurrence of the point kills), slice_count, lease_ms, remote (S3Remote kwargs or null),
loops (fold repeatedly, for the two-process test; LeaseHeld is then retried).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from echomq.archive import Driver, S3Remote
from echomq.errors import LeaseHeld
from echomq.queue.connection import connect


def main() -> None:
    spec = json.loads(sys.argv[1])
    conn = connect(spec["url"])
    remote = S3Remote(**spec["remote"], retries=1, backoff_s=0.01) if spec["remote"] else None
    hits = {"n": 0}

    def hook(point: str) -> None:
        if point == spec.get("point"):
            hits["n"] += 1
            if hits["n"] == spec.get("at", 1):
                os.kill(os.getpid(), signal.SIGKILL)

    driver = Driver(conn, spec["floor"], remote, slice_count=spec["slice_count"],
                    lease_ms=spec.get("lease_ms", 30_000), hook=hook)
    deadline = time.monotonic() + spec.get("seconds", 0)
    while True:
        try:
            report = driver.fold(spec["queue"])
            print(json.dumps(report.to_dict()), flush=True)
        except LeaseHeld:
            time.sleep(0.01)
        if time.monotonic() >= deadline:
            break
    print("finished", flush=True)


if __name__ == "__main__":
    main()
