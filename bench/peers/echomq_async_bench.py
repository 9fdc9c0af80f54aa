"""EchoMQ's async task (an ``async def`` no-op on the worker's event loop, concurrency
100) for the peers' harness, beside arq; see echomq_tasks.toml."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from echomq_task_bench import QUEUE, TASK, enqueue, verify

__all__ = ["enqueue", "verify", "version", "work"]


def version() -> str:
    import echomq

    return f"echomq {echomq.__version__} (async task on the event loop)"


async def _noop(i: int) -> None:
    return None


def work(url: str, n: int, concurrency: int | None, ready: Callable[[], Any]) -> None:
    import redis

    import echomq

    app = echomq.App(url)
    app.task(queue=QUEUE, name=TASK)(_noop)
    worker = app.worker([QUEUE], concurrency=concurrency or 100, lease_ms=30_000)
    probe = redis.Redis.from_url(url)

    def stopper() -> None:
        while probe.zcard(f"emq:{{{QUEUE}}}:completed") < n:
            time.sleep(0.005)
        worker.stop()

    threading.Thread(target=stopper, daemon=True).start()
    ready()
    worker.run()
