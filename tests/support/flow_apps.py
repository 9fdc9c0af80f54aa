"""An App whose flows cross two queues, for the tests of verbs that meet flows."""

from __future__ import annotations

import uuid
from typing import Any

import echomq
from echomq.queue.connection import Connection


def across_queues(conn: Connection, tag: str) -> tuple[echomq.App, str, str, Any, Any]:
    """An App, its queues A and B (fresh names starting with ``tag``), ``double`` on A
    and ``report`` on B: a chord of doubles with a report is a parent across queues."""
    a, b = f"{tag}a-{uuid.uuid4().hex[:8]}", f"{tag}b-{uuid.uuid4().hex[:8]}"
    app = echomq.App(conn=conn)

    @app.task(queue=a, name="double")
    def double(n: int) -> int:
        return 2 * n

    @app.task(queue=b, name="report")
    def report(results: Any, label: str = "") -> dict[str, Any]:
        return {"label": label, "results": results}

    return app, a, b, double, report
