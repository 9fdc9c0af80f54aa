"""A FastAPI service that enqueues work in one endpoint and awaits its result in another,
with the EchoMQ dashboard mounted at ``/dashboard``.

Run it beside a worker, both against the same server (no ``EMQ_URL``: the folder's
embedded one)::

    pip install 'echomq[web]' fastapi uvicorn
    emq worker examples.fastapi_app:tasks -q reports &
    uvicorn examples.fastapi_app:api

    curl -X POST 'localhost:8000/reports?pages=3'          # {"job_id": "1"}
    curl 'localhost:8000/reports/1?timeout_s=10'           # {"state": "completed", ...}

Nothing here blocks the event loop: ``aenqueue`` and ``aio.wait`` are awaited on the
App's asyncio connection, opened on the first request.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException

import echomq
from echomq import aio

tasks = echomq.App(os.environ.get("EMQ_URL"))
QUEUE = "reports"


@tasks.task(queue=QUEUE, name="reports.render", timeout_s=60)
async def render(pages: int) -> dict[str, Any]:
    """The work: an async task, run by `emq worker examples.fastapi_app:tasks`."""
    job = echomq.current_job()
    assert job is not None
    for page in range(pages):
        await job.aprogress({"page": page + 1, "of": pages})
    return {"pages": pages}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """At start, mount the dashboard (its connection opens then, not at import); at the
    end, close the App's asyncio connection."""
    if os.environ.get("EMQ_DASHBOARD", "1") == "1":
        mount_dashboard(app, os.environ.get("EMQ_DASHBOARD_TOKEN"))
    yield
    await tasks.aclose()


api = FastAPI(title="reports", lifespan=lifespan)


@api.post("/reports")
async def create_report(pages: int) -> dict[str, str]:
    """Enqueue a report; its job id comes back at once."""
    if not 1 <= pages <= 1000:
        raise HTTPException(422, "pages must be between 1 and 1000")
    return {"job_id": await render.aenqueue(pages)}


@api.get("/reports/{job_id}")
async def report(job_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The report's outcome, waiting up to ``timeout_s`` for it (504 when it is not done)."""
    conn = await tasks.aconn()
    try:
        job = await aio.wait(conn, QUEUE, job_id, timeout_s=timeout_s)
    except echomq.WaitTimeout:
        raise HTTPException(504, f"job {job_id} is not done after {timeout_s:g} s") from None
    except echomq.JobGone:
        raise HTTPException(404, f"no job {job_id}") from None
    return {"state": job.state.value, "result": job.result, "progress": job.progress}


def mount_dashboard(app: FastAPI, token: str | None = None) -> None:
    """The dashboard at ``/dashboard``: read-only without a token (anyone who reaches the
    service sees the queues; only a token holder may steer them)."""
    from echomq.web.app import create_app

    app.mount("/dashboard", create_app(tasks.conn, token=token, read_only=token is None))
