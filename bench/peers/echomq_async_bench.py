"""EchoMQ's async task (an ``async def`` no-op on the worker's event loop, concurrency
100) for the peers' harness, beside arq; see echomq_tasks.toml."""

from __future__ import annotations

import echomq_task_bench
from echomq_task_bench import enqueue, verify


async def _noop(i: int) -> None:
    return None


echomq_task_bench.TASK_FUNCTION = _noop
echomq_task_bench.CONCURRENCY = 100
work = echomq_task_bench.work

__all__ = ["enqueue", "verify", "version", "work"]


def version() -> str:
    import echomq

    return f"echomq {echomq.__version__} (async task on the event loop)"
