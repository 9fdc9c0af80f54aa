"""A compaction run in a child process, killed with SIGKILL at one named crash point.

Usage: python compact_child.py SPEC_JSON. SPEC: url, queue, point, at (which occurrence
of the point kills), target_bytes, lease_ms, remote (S3Remote kwargs).
"""

from __future__ import annotations

import json
import os
import signal
import sys

from echomq.archive import S3Remote, compact
from echomq.queue.connection import connect


def main() -> None:
    spec = json.loads(sys.argv[1])
    conn = connect(spec["url"])
    remote = S3Remote(**spec["remote"], retries=1, backoff_s=0.01)
    hits = {"n": 0}

    def hook(point: str) -> None:
        if point == spec["point"]:
            hits["n"] += 1
            if hits["n"] == spec.get("at", 1):
                os.kill(os.getpid(), signal.SIGKILL)

    report = compact(conn, remote, spec["queue"], target_bytes=spec["target_bytes"],
                     lease_ms=spec.get("lease_ms", 30_000), hook=hook)
    print(json.dumps(report.to_dict()), flush=True)


if __name__ == "__main__":
    main()
