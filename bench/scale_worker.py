"""One worker process of the scale benchmark: one Consumer on one queue.

``python bench/scale_worker.py URL EXECUTOR QUEUE TOTAL [record]``. It connects, builds its
Consumer, prints ``ready`` and waits for a line on stdin, so that every process of a run
starts together after the interpreter's start-up (which is not the queue's cost); then it
settles TOTAL no-op jobs and prints, as JSON, the ``time.monotonic()`` of its last settle
(one clock for every process of the machine), the CPU seconds it spent from the go to then
(every thread, user + system: what it would need of a core of its own) and its RSS.
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time

import echomq
from echomq.worker.consumer import Consumer


def main() -> None:
    url, executor, queue, total_arg = sys.argv[1:5]
    record = sys.argv[5:6] == ["record"]
    total = int(total_arg)
    conn = echomq.connect(url, executor)  # type: ignore[arg-type]
    conn.redis.ping()
    consumer = Consumer(conn, queue, lambda job: None, concurrency=8, batch_size=100,
                        poll_ms=50, record=record)
    marks: dict[str, float] = {}

    def watch() -> None:
        while consumer.processed < total:
            time.sleep(0.001)
        marks["last"] = time.monotonic()
        marks["cpu"] = time.process_time() - marks["cpu"]
        consumer.stop()

    print("ready", flush=True)
    sys.stdin.readline()
    marks["cpu"] = time.process_time()
    threading.Thread(target=watch, daemon=True).start()
    consumer.run(install_signals=False)
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"last": marks["last"], "cpu": marks["cpu"], "rss_mib": rss_kib / 1024}),
          flush=True)


if __name__ == "__main__":
    main()
