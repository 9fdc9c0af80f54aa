"""What a job's debugging history costs Redis: a failed attempt with and without its
error record (type, message, a traceback of about 2 KiB), and a ``job.log`` line of 100
bytes. Server time per call from ``INFO commandstats`` (reset before each phase) and
bytes per job from ``used_memory``, on fresh private Valkeys in the same run; medians of
3 runs of 2,000 jobs."""

from __future__ import annotations

import json
import statistics

import echomq
from echomq.jobs.joblog import append_log
from echomq.queue.transitions import settles
from echomq.servers.valkey import EmbeddedValkey

JOBS = 2_000
TRACEBACK = "Traceback (most recent call last):\n" + "  File \"app.py\", line 1, in f\n" * 60


def _script_usec(conn: echomq.Connection) -> float:
    stats = conn.redis.info("commandstats")
    found = stats.get("cmdstat_evalsha", {})
    return float(found.get("usec_per_call", 0.0))


def _claimed(conn: echomq.Connection) -> list[echomq.ClaimedJob]:
    echomq.add_many(conn, "hist", [{"n": i} for i in range(JOBS)], max_attempts=10)
    jobs: list[echomq.ClaimedJob] = []
    while len(jobs) < JOBS:
        jobs += echomq.claim(conn, "hist", 600_000, 1000)
    return jobs


def one_run(kind: str) -> tuple[float, float]:
    """(server µs per call, bytes per job) for ``kind``: fail, fail+error or log."""
    with EmbeddedValkey() as server:
        conn = echomq.connect(server.url)
        keys = conn.keys("hist")
        jobs = _claimed(conn)
        conn.redis.config_resetstat()
        before = int(conn.redis.info("memory")["used_memory"])
        entry = json.dumps({"type": "OSError", "message": "connection reset",
                            "traceback": TRACEBACK})
        if kind == "log":
            for job in jobs:
                append_log(conn, "hist", job.id, job.token, "x" * 100)
        else:
            calls = [settles.fail_call(keys, j.id, j.token, "OSError: connection reset",
                                           backoff_ms=60_000, backoff_cap_ms=60_000,
                                           error_entry=entry if kind == "fail+error" else None)
                     for j in jobs]
            for i in range(0, len(calls), 100):
                conn.executor.run_many(calls[i:i + 100])
        used = int(conn.redis.info("memory")["used_memory"]) - before
        usec = _script_usec(conn)
        conn.close()
    return usec, used / JOBS


def rows(runs: int = 3) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    results = {kind: [one_run(kind) for _ in range(runs)]
               for kind in ("fail", "fail+error", "log")}
    for kind, label in (("fail", "fail, no error record"),
                        ("fail+error", "fail with its error record (~2 KiB traceback)"),
                        ("log", "job.log of one 100-byte line")):
        usec = statistics.median(r[0] for r in results[kind])
        size = statistics.median(r[1] for r in results[kind])
        out += [(f"{label}: Redis µs per call", f"{usec:.1f}"),
                (f"{label}: Redis bytes per job", f"{size:,.0f}")]
    return out


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name:60s} {value:>12s}")
