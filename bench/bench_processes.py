"""Worker processes: ``emq worker proc_app:app --processes N`` over no-op tasks and CPU-bound
ones (2 ms of pure Python each), with 1, 2 and 4 processes, on a fresh private Valkey per run.

Each run starts the supervisor, waits until every child runs its consumer, adds the jobs in
one batch and times them until all are completed: jobs/s end to end, and the worker CPU
per job (the children's and the supervisor's user+system time over that window, from
``/proc``; the server's is not counted). CPU-bound throughput can only grow up to the
machine's cores, which the table reports."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import echomq
from echomq.servers.valkey import EmbeddedValkey

HERE = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK")
KINDS = {"noop": ("bench.noop", [], 20_000, 8), "cpu 2 ms": ("bench.spin", [2.0], 2_000, 1)}
"""kind: (task, args, jobs, concurrency per process)."""


def cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds (``/proc/PID/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def workers(pid: int) -> list[int]:
    """The supervisor and its worker children (not multiprocessing's resource tracker)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [pid] + [int(p) for p in text.split()
                    if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]


def one_run(kind: str, processes: int) -> tuple[float, float]:
    """(jobs/s, worker CPU ms per job) for one run."""
    task, args, total, concurrency = KINDS[kind]
    with EmbeddedValkey() as server:
        conn = echomq.connect(server.url)
        proc = subprocess.Popen(
            [sys.executable, "-m", "echomq", "--url", server.url, "--log-level", "INFO",
             "worker", "proc_app:app", "-q", "bench", "--processes", str(processes),
             "--concurrency", str(concurrency)], cwd=HERE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 60
            while sum("echomq.consumer: consumer on" in line for line in lines) < processes:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the worker did not start:\n" + "".join(lines))
                time.sleep(0.05)
            pids = workers(proc.pid)
            cpu_before = sum(cpu_s(p) for p in pids)
            start = time.monotonic()
            echomq.add_many(conn, "bench", [{"args": args, "kwargs": {}}] * total, name=task)
            while echomq.counts(conn, "bench").completed < total:
                time.sleep(0.01)
            seconds = time.monotonic() - start
            cpu = sum(cpu_s(p) for p in pids) - cpu_before
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        conn.close()
    return total / seconds, cpu * 1000 / total


def rows(runs: int = 3, counts: tuple[int, ...] = (1, 2, 4)) -> list[tuple[str, str]]:
    out = [("cores (os.cpu_count)", str(os.cpu_count()))]
    for kind in KINDS:
        rates: dict[int, list[float]] = {n: [] for n in counts}
        cpus: dict[int, list[float]] = {n: [] for n in counts}
        for _ in range(runs):
            for n in counts:  # alternated: a noisy moment hits every count alike
                rate, cpu = one_run(kind, n)
                rates[n].append(rate)
                cpus[n].append(cpu)
        base = statistics.median(rates[counts[0]])
        for n in counts:
            rate = statistics.median(rates[n])
            out.append((f"{kind}, {n} process(es) x c={KINDS[kind][3]}: jobs/s (x vs 1)",
                        f"{rate:,.0f} ({rate / base:.2f}x)"))
            out.append((f"{kind}, {n} process(es): worker CPU per job",
                        f"{statistics.median(cpus[n]):.3f} ms"))
    return out


if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for name, value in rows(runs):
        print(f"{name:60s} {value:>20s}")
