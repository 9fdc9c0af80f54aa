"""The App the flow tests' worker processes run (``emq worker tests.support.flow_tasks:app``):
its queue comes from ``$EMQ_TEST_QUEUE`` and every run of ``slow`` and ``report`` appends a
line to ``$EMQ_TEST_MARKS`` (pid, task), so a test counts the runs a kill cut short."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import echomq

app = echomq.App()
QUEUE = os.environ.get("EMQ_TEST_QUEUE", "flows")
MARKS = Path(os.environ.get("EMQ_TEST_MARKS", "/dev/null"))


def _mark(what: str) -> int:
    """Append ``<pid> <what>`` to the marks file; how many runs of ``what`` came before."""
    before = MARKS.read_text().split().count(what) if MARKS.exists() else 0
    with MARKS.open("a") as out:
        out.write(f"{os.getpid()} {what}\n")
    return before


@app.task(queue=QUEUE, name="flows.double")
def double(n: int) -> int:
    return 2 * n


@app.task(queue=QUEUE, name="flows.slow")
def slow(n: int) -> int:
    """Slow on its first run (the one the test kills), quick on any later one."""
    if _mark("slow") == 0:
        time.sleep(60)
    return 2 * n


@app.task(queue=QUEUE, name="flows.report")
def report(results: list[Any]) -> Any:
    _mark("report")
    return results


if os.environ.get("EMQ_TEST_DIE_BEFORE_ACK"):
    # the worker dies (no cleanup, like kill -9) as soon as one of its deliverers (the
    # settler after a round, or the beat's fallback) finds an outcome owed to a parent on
    # another queue, so no thread of it delivers one
    from echomq.worker import flow_acks

    def _die_instead_of_delivering(self: flow_acks.FlowAcks) -> None:
        box = [self.conn.keys(q).flow_outbox for q in self.queues]
        if any(self.conn.redis.exists(key) for key in box):
            os._exit(9)

    flow_acks.FlowAcks._drain = _die_instead_of_delivering  # type: ignore[method-assign]
