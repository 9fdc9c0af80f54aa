"""An App the ``emq worker tests.support.tasks:app`` tests run; its queues come from
``$EMQ_TEST_QUEUES`` (``high,mail``), so each test has its own."""

from __future__ import annotations

import os

import echomq

app = echomq.App()
HIGH, MAIL = os.environ.get("EMQ_TEST_QUEUES", "high,mail").split(",")


@app.task(queue=MAIL, name="tests.send")
def send(to: str, subject: str = "") -> str:
    return f"sent {to} {subject}".strip()


@app.task(queue=HIGH, name="tests.ping")
def ping() -> str:
    return "pong"
