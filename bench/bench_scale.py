"""Scale: end-to-end jobs/s with 1, 2 and 4 worker processes, on one server and on the local
Cluster, and what one job costs Redis and the worker (CPU, memory), on both executors.

Every worker process (``scale_worker.py``) is one Consumer (c=8, batches of 100) on its own
queue; on the Cluster the queues are picked so that queue i lands on primary i mod 3, so
every primary gets traffic once there are 3 processes or more. The jobs (no-op handler) are
enqueued first; the clock runs from the moment every process is ready (interpreter started,
connected) to the last settle of the last process. Medians of 3, one run of each size in
turn so that a change of load on the machine falls on every size alike.

Beside the rate, CPU seconds per job: the servers' (``INFO cpu`` used_cpu_sys +
used_cpu_user over the primaries, adds included) and the worker processes' (their own
clock from the go to the last settle). On a shared machine the rate is bounded by the cores
the run gets; the CPU per job says what a core of its own would carry (1 / CPU per job).

The cost rows come from a fresh private Valkey per run: ``INFO cpu`` and ``INFO memory``
(used_memory) before and after the adds, and after one worker process settled them all;
with ``record`` the settles also append to the declared outcome stream, and the difference
to a run without is the stream entry's memory. A last row attaches one replica to the server:
what feeding it costs the primary.

    python bench/run.py scale        (or python bench/bench_scale.py)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import redis

import echomq
from echomq.queue.connection import ExecutorName
from echomq.servers.cluster import LocalCluster
from echomq.servers.valkey import EmbeddedValkey

HERE = Path(__file__).resolve().parent
WORKERS = (1, 2, 4)
TOTAL = 12_000
COST_TOTAL = 6_000
RUNS = 3
EXECUTORS: tuple[ExecutorName, ...] = ("scripts", "functions")
Nodes = Callable[[], Sequence[redis.Redis]]


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def run_workers(url: str, executor: str, queues: Sequence[str], per_queue: int,
                record: bool = False) -> tuple[float, float]:
    """Seconds from the moment every worker process is ready to the last settle, and the
    CPU seconds the worker processes spent in that time."""
    argv = [sys.executable, str(HERE / "scale_worker.py"), url, executor]
    procs = [subprocess.Popen([*argv, q, str(per_queue), *(["record"] if record else [])],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for q in queues]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"a worker process did not start: {line!r}")
        started = time.monotonic()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        lasts, cpu = [], 0.0
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"a worker process exited with {proc.returncode}")
            report = json.loads(out.strip().splitlines()[-1])
            lasts.append(report["last"])
            cpu += report["cpu"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return max(lasts) - started, cpu


def redis_cpu(nodes: Sequence[redis.Redis]) -> float:
    """Seconds of CPU the servers used so far (system + user, every thread)."""
    total = 0.0
    for node in nodes:
        info = node.info("cpu")
        total += float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return total


def used_memory(node: redis.Redis) -> int:
    node.execute_command("MEMORY", "PURGE")
    return int(node.info("memory")["used_memory"])


def one_scale_run(conn: echomq.Connection, nodes: Nodes, queues: Sequence[str]
                  ) -> dict[str, float]:
    """Jobs/s, and the servers' and the workers' CPU seconds per job, of one run on empty
    servers."""
    for node in nodes():
        node.flushall()
    per_queue = TOTAL // len(queues)
    jobs = per_queue * len(queues)
    cpu_before = redis_cpu(nodes())
    for q in queues:
        echomq.add_many(conn, q, [{"n": i} for i in range(per_queue)])
    seconds, worker_cpu = run_workers(conn.url, conn.executor_name, queues, per_queue)
    redis_cpu_s = redis_cpu(nodes()) - cpu_before
    for q in queues:
        counts = echomq.counts(conn, q)
        assert counts.completed == per_queue and counts.pending == counts.active == 0, counts
    return {"rate": jobs / seconds, "redis_cpu": redis_cpu_s / jobs,
            "worker_cpu": worker_cpu / jobs}


def spread_queues(conn: echomq.Connection, count: int) -> tuple[list[str], int]:
    """``count`` queue names, queue i on primary i mod (number of primaries); on one server
    simply ``scale-0`` ... The second value is how many primaries they cover."""
    if not conn.cluster:
        return [f"scale-{i}" for i in range(count)], 1
    client: Any = conn.redis
    by_node: dict[str, list[str]] = {}
    for i in range(200):
        name = f"scale-{i}"
        by_node.setdefault(client.get_node_from_key(conn.keys(name).meta).name, []).append(name)
    columns = sorted(by_node.values())
    picked = [columns[i % len(columns)][i // len(columns)] for i in range(count)]
    return picked, min(count, len(columns))


def scale_rows(label: str, conn: echomq.Connection, nodes: Nodes
               ) -> Iterator[tuple[str, str]]:
    results: dict[int, list[dict[str, float]]] = {w: [] for w in WORKERS}
    spreads = {w: spread_queues(conn, w) for w in WORKERS}
    for _ in range(RUNS):
        for w in WORKERS:
            results[w].append(one_scale_run(conn, nodes, spreads[w][0]))
    for w in WORKERS:
        def med(name: str, found: list[dict[str, float]] = results[w]) -> float:
            return statistics.median(r[name] for r in found)

        queues, primaries = spreads[w]
        where = (f"{len(queues)} queue{'s' if w > 1 else ''} on {primaries} "
                 f"primar{'ies' if primaries > 1 else 'y'}")
        yield (f"scale: {label}, {w} worker process{'es' if w > 1 else ''} ({where}): "
               "jobs/s (per process); CPU per job, Redis / worker",
               f"{med('rate'):,.0f} ({med('rate') / w:,.0f}); "
               f"{med('redis_cpu') * 1e6:.0f} / {med('worker_cpu') * 1e6:.0f} µs")


def one_server_rows() -> Iterator[tuple[str, str]]:
    with EmbeddedValkey() as server:
        conn = echomq.connect(server.url)
        admin = redis.Redis.from_url(server.url, socket_timeout=30)
        try:
            yield from scale_rows("one server", conn, lambda: [admin])
        finally:
            admin.close()
            conn.close()


def cluster_rows() -> Iterator[tuple[str, str]]:
    with LocalCluster() as cluster:
        conn = echomq.connect(cluster.url)
        primaries = [redis.Redis(host=n.host, port=n.port, socket_timeout=30)
                     for n in cluster.primary_nodes()]
        label = f"Cluster ({len(primaries)} primaries + {cluster.replicas} replica each)"
        try:
            yield from scale_rows(label, conn, lambda: primaries)
        finally:
            for c in primaries:
                c.close()
            conn.close()


@contextmanager
def replica_of(server: EmbeddedValkey) -> Iterator[None]:
    """A replica of ``server`` for the block, its link up before the block starts."""
    replica = EmbeddedValkey(extra_args=["--replicaof", server.host, str(server.port)]).start()
    client = redis.Redis.from_url(replica.url, socket_timeout=30)
    try:
        deadline = time.monotonic() + 30
        while client.info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not link up in 30 s")
            time.sleep(0.05)
        yield
    finally:
        client.close()
        replica.cleanup()


def one_cost_run(executor: ExecutorName, record: bool, replica: bool = False
                 ) -> dict[str, float]:
    with EmbeddedValkey() as server, replica_of(server) if replica else nullcontext():
        conn = echomq.connect(server.url, executor)
        admin = redis.Redis.from_url(server.url, socket_timeout=30)
        try:
            mem0, cpu0 = used_memory(admin), redis_cpu([admin])
            echomq.add_many(conn, "cost", [{"n": i} for i in range(COST_TOTAL)])
            mem1, cpu1 = used_memory(admin), redis_cpu([admin])
            _, worker_cpu = run_workers(server.url, executor, ["cost"], COST_TOTAL, record)
            mem2, cpu2 = used_memory(admin), redis_cpu([admin])
        finally:
            admin.close()
            conn.close()
    return {"add_cpu": (cpu1 - cpu0) / COST_TOTAL, "settle_cpu": (cpu2 - cpu1) / COST_TOTAL,
            "pending_bytes": (mem1 - mem0) / COST_TOTAL,
            "finished_bytes": (mem2 - mem0) / COST_TOTAL, "worker_cpu": worker_cpu / COST_TOTAL}


def cost_rows() -> Iterator[tuple[str, str]]:
    for executor in EXECUTORS:
        plain = [one_cost_run(executor, False) for _ in range(RUNS)]
        recorded = [one_cost_run(executor, True) for _ in range(RUNS)]

        def med(name: str, results: list[dict[str, float]] = plain) -> float:
            return statistics.median(r[name] for r in results)

        label = f"cost: one server, {executor}, {COST_TOTAL:,} no-op jobs, 1 worker process"
        per_job = med("add_cpu") + med("settle_cpu")
        yield (f"{label}: Redis CPU per job, add / claim + complete (µs)",
               f"{med('add_cpu') * 1e6:.1f} / {med('settle_cpu') * 1e6:.1f}")
        yield (f"{label}: the same with the outcome recorded in the stream (µs)",
               f"{med('add_cpu', recorded) * 1e6:.1f} / {med('settle_cpu', recorded) * 1e6:.1f}")
        yield (f"{label}: one Redis core's ceiling at that cost (jobs/s)",
               f"{1 / per_job:,.0f}")
        yield (f"{label}: worker CPU per job (µs); one worker core's ceiling (jobs/s)",
               f"{med('worker_cpu') * 1e6:.0f}; {1 / med('worker_cpu'):,.0f}")
        yield (f"{label}: Redis memory per pending job / per finished row kept (B)",
               f"{med('pending_bytes'):,.0f} / {med('finished_bytes'):,.0f}")
        yield (f"{label}: Redis memory per recorded outcome's stream entry (B)",
               f"{med('finished_bytes', recorded) - med('finished_bytes'):,.0f}")
    replicated = [one_cost_run(EXECUTORS[0], False, replica=True) for _ in range(RUNS)]
    add = statistics.median(r["add_cpu"] for r in replicated)
    settle = statistics.median(r["settle_cpu"] for r in replicated)
    yield (f"cost: one server + 1 replica, {EXECUTORS[0]}, {COST_TOTAL:,} no-op jobs: "
           "the primary's CPU per job, add / claim + complete (µs)",
           f"{add * 1e6:.1f} / {settle * 1e6:.1f}")


def rows() -> list[tuple[str, str]]:
    found = [("scale: machine", f"{os.cpu_count()} cores (os.cpu_count()); "
              f"load average at start {load_average()}")]
    found += one_server_rows()
    found += cluster_rows()
    found += cost_rows()
    found.append(("scale: load average at the end", load_average()))
    return found


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name:100s} {value:>30s}")
