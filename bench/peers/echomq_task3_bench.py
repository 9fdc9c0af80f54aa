"""EchoMQ's App task with the worker over three queues (the jobs on the last), for the
peers' harness; see echomq_tasks.toml."""

from __future__ import annotations

import echomq_task_bench
from echomq_task_bench import enqueue, verify, version

echomq_task_bench.QUEUES[:] = ["bench-a", "bench-b", echomq_task_bench.QUEUE]
work = echomq_task_bench.work

__all__ = ["enqueue", "verify", "version", "work"]
