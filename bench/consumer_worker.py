"""One worker process for the benchmark: process N no-op jobs, report time and RSS as JSON.

``consumer_worker.py URL QUEUE TOTAL CONCURRENCY PREFETCH [MODE]``: MODE ``plain`` (a
Consumer with a no-op handler, the default), ``task`` (an App's no-op task, routed by
name), ``task3`` (the same task, the worker over three queues ``QUEUE-a``, ``QUEUE-b``
and ``QUEUE`` in strict order, so every claim round asks two empty queues first),
``async`` (an ``async def`` no-op task on the event loop) or ``async-io`` (an async task
that awaits ``asyncio.sleep(0.05)``: I/O-bound)."""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import threading
import time

import echomq
from echomq.worker.consumer import Consumer


async def async_noop(n: int) -> None:
    return None


async def async_io(n: int) -> None:
    await asyncio.sleep(0.05)


def worker(conn: echomq.Connection, queue: str, mode: str, concurrency: int,
           prefetch: int | None) -> Consumer:
    options = {"concurrency": concurrency, "prefetch": prefetch,
               "batch_size": min(1000, max(100, concurrency)), "poll_ms": 50}
    if mode == "plain":
        return Consumer(conn, queue, lambda job: None, **options)
    app = echomq.App(conn=conn)
    if mode == "async":
        app.task(queue=queue, name="bench.noop")(async_noop)
    elif mode == "async-io":
        app.task(queue=queue, name="bench.noop")(async_io)
    else:
        app.task(queue=queue, name="bench.noop")(lambda n: None)
    queues = [f"{queue}-a", f"{queue}-b", queue] if mode == "task3" else [queue]
    return app.worker(queues, **options).consumer


def main() -> None:
    url, queue, total, concurrency, prefetch = sys.argv[1:6]
    mode = sys.argv[6] if len(sys.argv) > 6 else "plain"
    conn = echomq.connect(url)
    consumer = worker(conn, queue, mode, int(concurrency),
                      None if prefetch == "auto" else int(prefetch))
    marks: dict[str, float] = {}

    def watch() -> None:
        while consumer.processed == 0:
            time.sleep(0.0005)
        marks["first"] = time.perf_counter()
        while consumer.processed < int(total):
            time.sleep(0.001)
        marks["last"] = time.perf_counter()
        consumer.stop()

    threading.Thread(target=watch, daemon=True).start()
    start = time.perf_counter()
    consumer.run(install_signals=False)
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": marks["last"] - start, "rss_mib": rss_kib / 1024}))


if __name__ == "__main__":
    main()
