"""EchoMQ's App task, one queue, for the peers' harness (its four-function plug-in
contract: version, enqueue, work, verify); see echomq_tasks.toml."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

QUEUE = "bench"
QUEUES = [QUEUE]
TASK = "bench.noop"
CONCURRENCY = 10
"""The worker's concurrency when the harness gives none."""


def noop(i: int) -> None:
    return None


TASK_FUNCTION: Callable[[int], Any] = noop
"""What the task runs (``echomq_async_bench`` puts an ``async def`` here)."""


def version() -> str:
    import echomq

    return f"echomq {echomq.__version__} (App task over {len(QUEUES)} queue(s))"


def enqueue(url: str, n: int) -> str:
    import echomq

    app = echomq.App(url)
    noop = app.task(queue=QUEUE, name=TASK)(lambda i: None)
    noop.enqueue_many([(i,) for i in range(n)])
    app.close()
    return "Task.enqueue_many, one round trip per 1000"


def work(url: str, n: int, concurrency: int | None, ready: Callable[[], Any]) -> None:
    import redis

    import echomq

    app = echomq.App(url)
    app.task(queue=QUEUE, name=TASK)(TASK_FUNCTION)
    worker = app.worker(QUEUES, concurrency=concurrency or CONCURRENCY, lease_ms=30_000)
    probe = redis.Redis.from_url(url)

    def stopper() -> None:
        while probe.zcard(f"emq:{{{QUEUE}}}:completed") < n:
            time.sleep(0.005)
        worker.stop()

    threading.Thread(target=stopper, daemon=True).start()
    ready()
    worker.run()


def verify(url: str, n: int) -> dict[str, Any]:
    import redis

    r = redis.Redis.from_url(url, decode_responses=True)
    done = r.zcard(f"emq:{{{QUEUE}}}:completed")
    dead = r.zcard(f"emq:{{{QUEUE}}}:dead")
    return {"finished": done, "failed": dead, "detail": f"completed {done}, dead {dead}"}
