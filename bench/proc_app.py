"""The App ``bench_processes.py`` runs as ``emq worker proc_app:app --processes N``: a no-op
task and a CPU-bound one (pure Python for about ``ms`` milliseconds, holding the GIL)."""

from __future__ import annotations

import time

import echomq

app = echomq.App()


@app.task(queue="bench", name="bench.noop")
def noop() -> None:
    return None


@app.task(queue="bench", name="bench.spin")
def spin(ms: float) -> int:
    end = time.thread_time() + ms / 1000
    n = 0
    while time.thread_time() < end:
        n += 1
    return n
