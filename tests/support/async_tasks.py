"""An App of one async task for the worker-process tests (``emq worker
tests.support.async_tasks:app``); its queue comes from ``$EMQ_TEST_QUEUE``."""

from __future__ import annotations

import asyncio
import os

import echomq

app = echomq.App()
QUEUE = os.environ.get("EMQ_TEST_QUEUE", "crawl")


@app.task(queue=QUEUE, name="tests.crawl")
async def crawl(n: int) -> int:
    await asyncio.sleep(0.3)
    return n
