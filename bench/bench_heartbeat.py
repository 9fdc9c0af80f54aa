"""Benchmark the worker heartbeat's cost on the beat (not a test): one beat's lease renewal
(``Beat.renew_held``) with and without the worker's record, idle and holding jobs, on a
private Valkey it starts and stops itself, on both executors. Counts the round trips
(pipelines sent) and the wall time per beat (median of ``--beats``).

    python bench/bench_heartbeat.py [--beats 2000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import echomq
from echomq.queue.connection import connect
from echomq.servers.valkey import EmbeddedValkey
from echomq.worker.beat import Beat
from echomq.worker.context import JobContext
from echomq.worker.heartbeat import Heartbeat
from echomq.worker.held import Held
from echomq.worker.queues import QueuePlan


def _held(conn: Any, queue: str, held: int) -> Held:
    keeper = Held(conn)
    if held:
        echomq.add_many(conn, queue, [{"n": i} for i in range(held)])
        jobs = echomq.claim(conn, queue, count=held, lease_ms=60_000)
        keeper.add([JobContext(conn, queue, j.id, j.token, "null", 60_000) for j in jobs])
    return keeper


def _beat(conn: Any, queue: str, keeper: Held, record: bool) -> Beat:
    heartbeat = Heartbeat(conn, [queue], 8, 15_000) if record else None
    return Beat(conn, QueuePlan(conn, queue), keeper, lease_ms=60_000, auto_extend=False,
                recovery="reap", max_stalled=1, heartbeat=heartbeat)


def measure(conn: Any, beats: dict[bool, Beat], n: int) -> dict[bool, tuple[float, float]]:
    """Per variant (record or not): (median µs per renew_held, round trips per beat); the
    variants alternate beat by beat, so a busy machine weighs on both alike."""
    executor = conn.executor
    sent = dict.fromkeys(beats, 0)
    times: dict[bool, list[float]] = {record: [] for record in beats}
    original = executor._run_many
    current = False

    def counting(calls: Any, wait: Any) -> Any:
        sent[current] += 1
        return original(calls, wait)

    executor._run_many = counting
    for _ in range(n):
        for current, beat in beats.items():  # noqa: B007 - read by counting()
            started = time.perf_counter()
            beat.renew_held()
            times[current].append(time.perf_counter() - started)
    executor._run_many = original
    return {r: (statistics.median(times[r]) * 1e6, sent[r] / n) for r in beats}


def rows(beats: int = 2000) -> list[tuple[str, str]]:
    out = []
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as folder:
        valkey = EmbeddedValkey(Path(folder) / "valkey").start()
        try:
            for executor in ("scripts", "functions"):
                conn = connect(valkey.url, executor)  # type: ignore[arg-type]
                for held in (0, 50):
                    queue = f"hb-{executor}-{held}"
                    keeper = _held(conn, queue, held)
                    assert len(keeper.jobs) == held
                    measured = measure(conn, {r: _beat(conn, queue, keeper, r)
                                              for r in (False, True)}, beats)
                    (off_us, off_rt), (on_us, on_rt) = measured[False], measured[True]
                    out.append((f"{executor}, {held} held: renew_held without / with record",
                                f"{off_us:.0f} / {on_us:.0f} µs (+{on_us - off_us:.0f}), "
                                f"round trips {off_rt:.0f} / {on_rt:.0f}"))
                conn.close()
        finally:
            valkey.cleanup()
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--beats", type=int, default=2000)
    for measure_name, value in rows(parser.parse_args().beats):
        print(f"{measure_name}: {value}")
