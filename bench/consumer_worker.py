"""One worker process for the benchmark: process N no-op jobs, report time and RSS as JSON."""

from __future__ import annotations

import json
import resource
import sys
import threading
import time

import echomq
from echomq.worker.consumer import Consumer


def main() -> None:
    url, queue, total, concurrency, prefetch = sys.argv[1:6]
    conn = echomq.connect(url)
    consumer = Consumer(conn, queue, lambda job: None, concurrency=int(concurrency),
                        prefetch=None if prefetch == "auto" else int(prefetch),
                        batch_size=100, poll_ms=50)
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
