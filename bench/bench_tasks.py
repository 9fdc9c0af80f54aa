"""Tasks against the plain Consumer: 20 000 no-op jobs by one worker process, as a plain
Consumer, as an App's task on one queue, as that task with the worker over three queues
(the jobs on the last, so every round asks two empty queues first), and as an async task
on the event loop (concurrency 100); beside them an I/O-bound async task (awaits 50 ms)
at concurrency 500. All run alternated, each on a fresh private Valkey, in the same run;
medians of 3 and the ratios to the plain Consumer."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import echomq
from echomq.servers.valkey import EmbeddedValkey

HERE = Path(__file__).resolve().parent
MODES = {"plain": ("plain Consumer", 10), "task": ("task, 1 queue", 10),
         "task3": ("task, 3 queues", 10), "async": ("async task", 100),
         "async-io": ("async task awaiting 50 ms", 500)}
"""Each worker mode (``consumer_worker.py``): its label and its concurrency."""


def one_run(mode: str, total: int) -> float:
    """Jobs per second, end to end, for one worker process in ``mode``."""
    with EmbeddedValkey() as server:
        conn = echomq.connect(server.url)
        payloads = ([{"n": i} for i in range(total)] if mode == "plain"
                    else [{"args": [i], "kwargs": {}} for i in range(total)])
        echomq.add_many(conn, "bench", payloads, name=None if mode == "plain" else "bench.noop")
        proc = subprocess.run(
            [sys.executable, str(HERE / "consumer_worker.py"), server.url, "bench", str(total),
             str(MODES[mode][1]), "auto", mode], capture_output=True, text=True, check=True)
        worker = json.loads(proc.stdout.strip().splitlines()[-1])
        counts = echomq.counts(conn, "bench")
        assert counts.completed == total and counts.dead == 0, counts
        conn.close()
    return total / float(worker["seconds"])


def rows(runs: int = 3, total: int = 20_000) -> list[tuple[str, str]]:
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(runs):
        for mode in MODES:  # alternated: a noisy moment hits every mode alike
            rates[mode].append(one_run(mode, total))
            time.sleep(0.2)
    med = {mode: statistics.median(values) for mode, values in rates.items()}
    out = [(f"{label}, c={concurrency}: end to end (jobs/s)", f"{med[mode]:,.0f}")
           for mode, (label, concurrency) in MODES.items()]
    out += [(f"{MODES[mode][0]} / plain Consumer", f"{med[mode] / med['plain']:.2f}")
            for mode in ("task", "task3", "async")]
    return out


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name:60s} {value:>12s}")
