"""Coordination (not a test): what rate limits cost and how closely they hold.

- claim cost: the server's microseconds per claimed job (``INFO commandstats``: the
  claim script's own time, nothing else runs meanwhile) with no limit and with a limit
  that never blocks (so both claim the same jobs; the limit still trims and appends its
  log on every call), ungrouped and in one group, at claim batches of 1 and 50: the
  least of alternating chunks of ~250 jobs (none, limited, none, ...) on one private
  Valkey, so a busy moment of a shared machine falls on both alike.
- the same claims' Valkey instructions per job under callgrind (``bench_instructions``'
  way: a count the machine's load does not move; skipped without valgrind).
- accuracy: three worker processes (``emq worker``, a no-op handler) drain a backlog
  under ``500 per 1s`` for ``--seconds`` (10 by default, ``COORDINATION_SECONDS`` for
  ``bench/run.py``; the issue's figure is 60): the most starts in any 1 s window (the
  limit is 500) from each job's ``claimed_at`` (the server's clock), and the share of
  the allowed starts that happened (a start frees its slot 1 s later: 1 s over the mean
  time from each start to the one 500 later).

    python bench/bench_coordination.py [--seconds 60] [--executor functions]
    python bench/run.py coordination

:data:`PARTS` lists the functions whose rows the section prints: the rate limit's, then
deduplicated adds (``bench_dedup``) and a chord of 10,000 children (``bench_flows``), the
issue's four figures in one table.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import echomq
from echomq.queue.connection import Connection, ExecutorName
from echomq.servers.valkey import EmbeddedValkey

HERE = Path(__file__).resolve().parent
SECONDS = int(os.environ.get("COORDINATION_SECONDS", "10"))
EXECUTOR: ExecutorName = "scripts"
NEVER = (100_000, 86_400_000)
"""A limit no run reaches: the claim pays for the limit without being held back by it."""


def _fill(conn: Connection, queue: str, jobs: int, group: str | None) -> None:
    for start in range(0, jobs, 1000):
        echomq.add_many(conn, queue, [{"n": i} for i in range(start, min(jobs, start + 1000))],
                        group=group)


def _chunk_usec(conn: Connection, queue: str, batch: int, calls: int) -> float:
    """Server microseconds per job of ``calls`` claims of ``batch`` (the claim script's
    own time in ``INFO commandstats``; nothing else runs meanwhile)."""
    keys = conn.keys(queue)
    call = ("claim", [keys.pending, keys.scheduled, keys.active], [keys.base, 60_000, batch])
    stat = "cmdstat_fcall" if conn.executor_name == "functions" else "cmdstat_evalsha"
    conn.redis.config_resetstat()
    claimed = 0
    for _ in range(calls):
        claimed += (len(conn.executor.run(*call)) - 1) // 4
    if claimed != batch * calls:
        raise RuntimeError(f"claimed {claimed} of {batch * calls}: the queue ran dry")
    return float(conn.redis.info("commandstats")[stat]["usec"]) / claimed


def _costs(conn: Connection, grouped: bool, batch: int, jobs: int) -> tuple[float, float]:
    """The least server us/job of claims without and with a limit over alternating chunks
    of ~250 jobs on two queues filled alike: both see the same moments of the machine, and
    the least of many is the cost with the fewest interruptions (a shared machine's
    preemptions only ever add)."""
    group = "g" if grouped else None
    queues = {}
    for limited in (False, True):
        queue = queues[limited] = f"cost-{limited}-{time.monotonic_ns()}"
        if grouped:
            echomq.set_group_limit(conn, queue, "g", 100_000)
        if limited:
            echomq.set_rate_limit(conn, queue, *NEVER, group=group)
        _fill(conn, queue, jobs + batch, group)
        _chunk_usec(conn, queue, batch, 1)  # loaded; the first call's misses not counted
    calls = max(1, 250 // batch)
    samples: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(jobs // (calls * batch)):
        for limited in (False, True):
            samples[limited].append(_chunk_usec(conn, queues[limited], batch, calls))
    for queue in queues.values():
        echomq.obliterate(conn, queue, force=True)
    return min(samples[False]), min(samples[True])


def claim_cost_rows(jobs: int = 10_000) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    with EmbeddedValkey() as server:
        conn = echomq.connect(server.url, executor=EXECUTOR)
        for grouped in (False, True):
            for batch in (1, 50):
                none, limit = _costs(conn, grouped, batch, jobs if batch > 1 else jobs // 2)
                label = f"claim {'in one group' if grouped else 'ungrouped'}, batch {batch}"
                rows += [(f"{label}: server us/job, no limit", f"{none:.2f}"),
                         (f"{label}: server us/job, rate limit set", f"{limit:.2f}"),
                         (f"{label}: limit / no limit", f"{limit / none:.2f}")]
        conn.close()
    return rows


def _instructions(jobs: int = 2_000) -> dict[tuple[bool, int, bool], float]:
    """Valkey's instructions per claimed job (callgrind, as ``bench_instructions``): the
    count a shared machine's noise does not move, by (grouped, batch, limited)."""
    from bench_instructions import counted_valkey

    found: dict[tuple[bool, int, bool], float] = {}
    with counted_valkey("emq-coord-") as valkey:
        conn = echomq.connect(valkey.url, executor=EXECUTOR)
        for grouped in (False, True):
            for batch in (1, 50):
                for limited in (False, True):
                    queue, group = f"i-{grouped}-{batch}-{limited}", "g" if grouped else None
                    if grouped:
                        echomq.set_group_limit(conn, queue, "g", 100_000)
                    if limited:
                        echomq.set_rate_limit(conn, queue, *NEVER, group=group)
                    _fill(conn, queue, jobs + batch, group)
                    _chunk_usec(conn, queue, batch, 1)
                    valkey.zero()
                    keys = conn.keys(queue)
                    call = ("claim", [keys.pending, keys.scheduled, keys.active],
                            [keys.base, 60_000, batch])
                    for _ in range(jobs // batch):
                        conn.executor.run(*call)
                    found[grouped, batch, limited] = valkey.counted() / jobs
        conn.close()
    return found


def claim_instruction_rows() -> list[tuple[str, str]]:
    import shutil

    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        return [("claim instructions (valgrind is not installed)", "-")]
    counted = _instructions()
    rows: list[tuple[str, str]] = []
    for grouped in (False, True):
        for batch in (1, 50):
            none, limit = counted[grouped, batch, False], counted[grouped, batch, True]
            label = f"claim {'in one group' if grouped else 'ungrouped'}, batch {batch}"
            rows.append((f"{label}: Valkey instructions/job, no limit -> limit",
                         f"{none:,.0f} -> {limit:,.0f} ({limit / none:.2f})"))
    return rows


def busiest_window(times: list[int], per_ms: int) -> int:
    """The most starts in any window [t, t + per_ms) of the server's milliseconds."""
    best, first = 0, 0
    for last, at in enumerate(times):
        while times[first] <= at - per_ms:
            first += 1
        best = max(best, last - first + 1)
    return best


def accuracy_rows(seconds: int | None = None, rate: int = 500) -> list[tuple[str, str]]:
    seconds = seconds or SECONDS
    total = rate * (seconds + 1)
    with EmbeddedValkey() as server:
        conn = echomq.connect(server.url, executor=EXECUTOR)
        echomq.set_rate_limit(conn, "acc", rate, 1000)
        ids: list[str] = []
        for start in range(0, total, 1000):
            ids += echomq.add_many(conn, "acc", [{"n": i} for i in range(
                start, min(total, start + 1000))])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
        procs = [subprocess.Popen(
            [sys.executable, "-m", "echomq", "--url", server.url, "--executor", EXECUTOR,
             "--log-level", "WARNING", "worker", "coordination_handlers:quick", "-q", "acc",
             "--grace", "1s"], cwd=HERE, env=env, stdout=subprocess.DEVNULL)
            for _ in range(3)]
        try:
            while echomq.counts(conn, "acc").completed < total:
                time.sleep(0.05)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(30)
        pipe = conn.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(conn.keys("acc").job(job_id), "claimed_at")
        times = sorted(int(t) for t in pipe.execute())
        conn.close()
    # a start frees its slot 1 s later: under a backlog start i follows start i - rate by
    # 1 s at best; the share used is 1 s over the mean of those gaps
    gaps = [times[i] - times[i - rate] for i in range(rate, len(times))]
    used = 1000 / (sum(gaps) / len(gaps))
    label = f"rate limit {rate}/s, 3 worker processes, {seconds} s"
    return [(f"{label}: most starts in any 1 s window", f"{busiest_window(times, 1000)}"),
            (f"{label}: allowed starts used (%)", f"{100 * used:.1f}")]


def dedup_rows() -> list[tuple[str, str]]:
    """Deduplicated adds per second beside plain ones (``bench_dedup``)."""
    import bench_dedup
    return bench_dedup.rows()


def flow_rows() -> list[tuple[str, str]]:
    """A chord of 10,000 children: the add, the release, the hand-over (``bench_flows``)."""
    import bench_flows
    return bench_flows.rows()


PARTS: list[Callable[[], list[tuple[str, str]]]] = [claim_cost_rows, claim_instruction_rows,
                                                    accuracy_rows, dedup_rows, flow_rows]
"""The section's parts, in the order they print (``dedup`` and ``flows`` also run alone)."""


def rows() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for part in PARTS:
        found += part()
    return found


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=SECONDS)
    parser.add_argument("--executor", choices=["scripts", "functions"], default="scripts")
    options = parser.parse_args()
    EXECUTOR = options.executor
    SECONDS = options.seconds
    for name, value in rows():
        print(f"{name:70s} {value:>12s}")
