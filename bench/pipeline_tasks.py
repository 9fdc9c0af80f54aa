"""The App the pipeline benchmark's workers run (``emq worker pipeline_tasks:app``)."""

from __future__ import annotations

import echomq

app = echomq.App()


@app.task(queue="pipe", name="bench.pipe")
def handle(n: int) -> int:
    return n
