"""One archive driver process for the many-drivers tests: ``fold_declared`` in a loop.

Usage: python drivers_child.py SPEC_JSON. SPEC: url, prefix, floor, remote (S3Remote
kwargs), name, lease_ms, slice_count, interval_s, stop_file (the loop ends when it
exists), and optionally ``kill`` or ``stall``: {"point": a crash point, "at": which
occurrence, counted from pass "passes" on}, where the process sends itself SIGKILL or
SIGSTOP (after saying so).
Prints one JSON line per event: a pass's reports, each trim, the kill or the stall.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from echomq.archive import Driver, S3Remote
from echomq.queue.connection import connect


def say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def main() -> None:
    spec = json.loads(sys.argv[1])
    conn = connect(spec["url"], prefix=spec["prefix"])
    remote = S3Remote(**spec["remote"], retries=2, backoff_s=0.01)
    hits: dict[str, int] = {}
    passes = 0
    driver: Driver | None = None

    def hook(point: str) -> None:
        nonlocal passes
        assert driver is not None
        queue = driver.folding
        if point == "after_trim":
            say("trim", queue=queue)
        for action, signum in (("kill", signal.SIGKILL), ("stall", signal.SIGSTOP)):
            fault = spec.get(action)
            if fault and point == fault["point"] and passes >= fault.get("passes", 0):
                hits[action] = hits.get(action, 0) + 1
                if hits[action] == fault["at"]:
                    say(action, queue=queue)
                    os.kill(os.getpid(), signum)
                    say("resumed", queue=queue)

    driver = Driver(conn, spec["floor"], remote, slice_count=spec["slice_count"],
                    lease_ms=spec["lease_ms"], hook=hook, name=spec["name"])
    try:
        while not os.path.exists(spec["stop_file"]):
            reports = driver.fold_declared()
            say("pass", reports=[r.to_dict() for r in reports.values()])
            passes += 1
            time.sleep(spec["interval_s"])
    finally:
        driver.close()
    say("finished")


if __name__ == "__main__":
    main()
