"""Instructions per job (not a test): what the Consumer and ``add_many`` cost, counted by
valgrind's callgrind, so that two trees compare on a shared, noisy machine where wall
clocks and CPU seconds move by tens of percent between runs and instruction counts by
about 1%. Needs ``valgrind`` (``callgrind_control`` beside it); slow (valgrind runs the
counted process ~50x slower), so N is small.

- Redis per job: the server's instructions while ``add_many`` enqueues N jobs (1000 a
  call), then while one Consumer (``bench/consumer_worker.py``, c=8) claims and settles them;
  and per call of a one-job ``add`` (300 calls), where a script's fixed cost shows.
- worker per job: the Consumer process's instructions from its first claim to the last
  settle (its start-up is not counted; ``start`` counts a fresh interpreter's
  ``import echomq`` + ``connect`` + ``Consumer(...)``, as the peers' harness spawns it).

    python bench/bench_instructions.py [--jobs 10000]
    PYTHONPATH=/other/tree python bench/bench_instructions.py   # the same counts for another tree
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
ONE_JOB_ADDS = 300
WORKER = """
import sys, threading, time
import echomq
from echomq.worker.consumer import Consumer
url, n = sys.argv[1], int(sys.argv[2])
consumer = Consumer(echomq.connect(url), "bench", lambda job: None, concurrency=8)
def stop_when_done():
    while consumer.processed < n:
        time.sleep(0.002)
    consumer.stop()
threading.Thread(target=stop_when_done, daemon=True).start()
print("READY", flush=True)
input()
consumer.run(install_signals=False)
print("DONE", flush=True)
input()
"""
START = """
import echomq
from echomq.worker.consumer import Consumer
Consumer(echomq.connect("redis://127.0.0.1:1/0", check=False), "bench", lambda job: None)
"""


def _callgrind(out: str, *argv: str, at_start: bool = True) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            f"--instr-atstart={'yes' if at_start else 'no'}", *argv]


def _counted(pid: int, out: str, dumps: int) -> int:
    """Dump ``pid``'s counts (the ``dumps``-th dump) and zero them: the instructions since."""
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=True)
    path = f"{out}.{dumps}"
    for _ in range(200):
        if os.path.exists(path) and "\nsummary:" in Path(path).read_text():
            break
        time.sleep(0.05)
    for line in Path(path).read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {path}")


@dataclass
class CountedValkey:
    """A Valkey run by callgrind on a free port: its URL and its counts, dumped on ask."""

    server: subprocess.Popen[bytes]
    url: str
    folder: str
    dumps: int = 0

    def zero(self) -> None:
        subprocess.run(["callgrind_control", "-z", str(self.server.pid)], capture_output=True,
                       check=True)

    def counted(self) -> int:
        """The server's instructions since the last zero or dump (then zeroed)."""
        self.dumps += 1
        return _counted(self.server.pid, f"{self.folder}/server.cg", self.dumps)


@contextmanager
def counted_valkey(prefix: str) -> Iterator[CountedValkey]:
    """A fresh Valkey under callgrind, answering PING, stopped and its folder removed after."""
    from echomq.servers.process import free_port
    from echomq.servers.valkey import valkey_binary

    folder = tempfile.mkdtemp(prefix=prefix)
    port = free_port()
    server = subprocess.Popen(
        _callgrind(f"{folder}/server.cg", valkey_binary(), "--port", str(port), "--save", "",
                   "--appendonly", "no", "--dir", folder),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = redis.Redis(port=port)
    try:
        for _ in range(600):
            try:
                probe.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        yield CountedValkey(server, f"redis://127.0.0.1:{port}/0", folder)
    finally:
        probe.close()
        server.terminate()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)


def measure(jobs: int) -> dict[str, float]:
    with counted_valkey("emq-instr-") as valkey:
        return _measure(valkey, jobs)


def _measure(valkey: CountedValkey, jobs: int) -> dict[str, float]:
    import echomq

    folder, url = valkey.folder, valkey.url
    conn = echomq.connect(url)
    echomq.add_many(conn, "warm", [0])  # scripts loaded before counting
    valkey.zero()
    for start in range(0, jobs, 1000):
        echomq.add_many(conn, "bench",
                        [{"n": i} for i in range(start, min(jobs, start + 1000))])
    enqueue = valkey.counted()
    for i in range(ONE_JOB_ADDS):
        echomq.add(conn, "one", {"n": i})
    one_add = valkey.counted() / ONE_JOB_ADDS
    worker_out = f"{folder}/worker.cg"
    worker = subprocess.Popen(
        _callgrind(worker_out, sys.executable, "-c", WORKER, url, str(jobs), at_start=False),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert worker.stdin is not None and worker.stdout is not None
    if worker.stdout.readline().strip() != "READY":
        raise RuntimeError("the worker did not start")
    subprocess.run(["callgrind_control", "-i", "on", str(worker.pid)], capture_output=True,
                   check=True)
    valkey.zero()
    worker.stdin.write("\n")
    worker.stdin.flush()
    if worker.stdout.readline().strip() != "DONE":
        raise RuntimeError("the worker did not finish")
    consume = valkey.counted()
    worked = _counted(worker.pid, worker_out, 1)
    worker.stdin.write("\n")
    worker.stdin.flush()
    worker.wait(timeout=120)
    if echomq.counts(conn, "bench").completed != jobs:
        raise RuntimeError("the worker did not complete every job")
    conn.close()
    started = subprocess.run(
        _callgrind(f"{folder}/start.cg", sys.executable, "-c", START),
        capture_output=True, text=True, check=True)
    start = next(int(line.split()[-1].replace(",", "")) for line in
                 started.stderr.splitlines() if "Collected" in line)
    return {"enqueue": enqueue / jobs, "consume": consume / jobs, "worker": worked / jobs,
            "start": start, "one_add": one_add}


def rows(jobs: int = 10_000) -> list[tuple[str, str]]:
    if shutil.which("valgrind") is None or not glob.glob(
            os.path.join(os.path.dirname(shutil.which("valgrind") or ""), "callgrind_control")):
        return [("instructions (valgrind is not installed)", "-")]
    m = measure(jobs)
    return [
        ("Redis instructions per job: add_many (1000 a call)", f"{m['enqueue']:,.0f}"),
        ("Redis instructions per call: add, one job a call", f"{m['one_add']:,.0f}"),
        ("Redis instructions per job: Consumer claim + complete (c=8)", f"{m['consume']:,.0f}"),
        ("worker instructions per job (first claim to last settle)", f"{m['worker']:,.0f}"),
        ("worker start instructions (import, connect, Consumer)", f"{m['start'] / 1e6:,.0f} M"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    for name, value in rows(parser.parse_args().jobs):
        print(f"{name:64s} {value:>12s}")
