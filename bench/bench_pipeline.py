"""The whole pipeline, sustained: producers at a fixed rate, worker processes recording
every outcome, ``emq scheduler --fold`` into a local SeaweedFS every second with
retention forgetting what the archive holds, for ``SECONDS`` per rate on one machine.

For each rate: whether it was held (every job settled, Redis memory flat: the slope of
``used_memory`` over the last 30 s, against the mean), the archive lag (stream entries
and the age of the oldest unfolded entry, the worst sample), and end-to-end latency from
add to settle (p50, p99, read from the archive's own records: ``at - created_at``). The
highest rate held is the headline. ``PIPELINE_RATES`` (jobs/s, comma list),
``PIPELINE_SECONDS`` and ``PIPELINE_WORKERS`` override the defaults."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import echomq
from echomq.archive import Floor
from echomq.servers.seaweed import SeaweedS3
from echomq.servers.valkey import EmbeddedValkey

HERE = Path(__file__).resolve().parent
QUEUE = "pipe"
RATES = [int(r) for r in os.environ.get("PIPELINE_RATES", "3000,6000,10000").split(",")]
SECONDS = int(os.environ.get("PIPELINE_SECONDS", "60"))
WORKERS = int(os.environ.get("PIPELINE_WORKERS", "2"))


def produce(conn: echomq.Connection, rate: int, seconds: int) -> int:
    """Add ``rate`` jobs a second for ``seconds``, in ticks of 10 ms; how many were added."""
    added, start = 0, time.monotonic()
    tick = 0.01
    while (now := time.monotonic() - start) < seconds:
        due = int(rate * now)
        if due > added:
            echomq.add_many(conn, QUEUE, [{"args": [n], "kwargs": {}}
                                          for n in range(added, due)], name="bench.pipe")
            added = due
        time.sleep(tick)
    return added


def slope_per_s(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of (time, bytes) samples, in bytes per second."""
    xs = [t for t, _ in samples]
    ys = [float(v) for _, v in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def one_rate(rate: int, folder: Path) -> dict[str, float]:
    with EmbeddedValkey(folder / "valkey") as server, SeaweedS3(folder / "s3") as s3:
        conn = echomq.connect(server.url)
        echomq.archive.declare(conn, QUEUE)
        echomq.set_retention(conn, QUEUE, completed_count=0, dead_count=0)
        path = f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
        env = {**os.environ, "PYTHONPATH": path,
               "EMQ_S3_ENDPOINT_URL": s3.endpoint_url, "EMQ_S3_BUCKET": "emq-pipeline",
               "EMQ_S3_CREATE_BUCKET": "1", "AWS_ACCESS_KEY_ID": s3.access_key,
               "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_DEFAULT_REGION": "us-east-1"}
        emq = [sys.executable, "-m", "echomq", "--url", server.url, "--log-level", "WARNING"]
        procs = [subprocess.Popen([*emq, "worker", "pipeline_tasks:app", "-q", QUEUE,
                                   "--record", "--concurrency", "10"], env=env, cwd=HERE)
                 for _ in range(WORKERS)]
        floor_path = folder / "floor"
        procs.append(subprocess.Popen(
            [*emq, "scheduler", "--no-cron", "--fold", "--fold-interval", "1s",
             "--retention-interval", "1s", "--floor", str(floor_path)], env=env, cwd=HERE))
        memory: list[tuple[float, int]] = []
        lags: list[tuple[int, float]] = []
        try:
            added: list[int] = []
            producer = threading.Thread(
                target=lambda: added.append(produce(echomq.connect(server.url), rate, SECONDS)))
            started = time.monotonic()
            producer.start()
            while producer.is_alive():
                r = conn.redis
                used = int(r.info("memory")["used_memory"])
                memory.append((time.monotonic() - started, used))
                first = r.xrange(conn.keys(QUEUE).completions, count=1)
                now_ms = int(time.time() * 1000)
                age = (now_ms - int(first[0][0].split("-")[0])) / 1000 if first else 0.0
                lags.append((int(r.xlen(conn.keys(QUEUE).completions)), age))
                time.sleep(1.0)
            producer.join()
            deadline = time.monotonic() + 60
            while _settled(conn) < added[0] and time.monotonic() < deadline:
                time.sleep(0.5)
            settled = _settled(conn)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(30)
        tail = [m for m in memory if m[0] >= SECONDS - 30]
        mean = statistics.fmean(v for _, v in tail) if tail else 0.0
        slope = slope_per_s(tail) if len(tail) > 2 else 0.0
        with Floor(floor_path) as floor:
            entries = list(floor.audit(QUEUE))
        latencies = sorted(e.at - e.created_at for e in entries if e.created_at is not None)
        conn.close()
    return {"added": added[0], "settled": settled, "slope": slope, "mean": mean,
            "lag_entries": max((e for e, _ in lags), default=0),
            "lag_s": max((a for _, a in lags), default=0.0),
            "p50": latencies[len(latencies) // 2] if latencies else float("nan"),
            "p99": latencies[int(len(latencies) * 0.99)] if latencies else float("nan")}


def _settled(conn: echomq.Connection) -> int:
    """Jobs settled so far: the lifetime completed count (retention forgets the rows)."""
    return echomq.metrics(conn, QUEUE)["completed"]


def rows() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    best = 0
    for rate in RATES:
        with tempfile.TemporaryDirectory(prefix="emq-pipeline-") as tmp:
            r = one_rate(rate, Path(tmp))
        flat = abs(r["slope"]) * 30 < 0.05 * r["mean"]  # under 5% growth over 30 s
        held = r["settled"] >= r["added"] and flat
        best = rate if held else best
        label = f"pipeline at {rate:,} jobs/s for {SECONDS} s, {WORKERS} workers"
        out += [
            (f"{label}: held (all settled, memory flat)",
             f"{'yes' if held else 'no'} ({r['settled']:,.0f}/{r['added']:,.0f})"),
            (f"{label}: Redis memory slope, last 30 s (KiB/s)", f"{r['slope'] / 1024:,.1f}"),
            (f"{label}: archive lag, worst (entries / s)",
             f"{r['lag_entries']:,.0f} / {r['lag_s']:.1f}"),
            (f"{label}: add to settle p50 / p99 (ms)", f"{r['p50']:,.0f} / {r['p99']:,.0f}"),
        ]
    out.append(("pipeline: highest rate held (jobs/s)", f"{best:,}"))
    return out


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name:70s} {value:>20s}")
