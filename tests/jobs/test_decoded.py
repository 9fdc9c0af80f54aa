"""``texts.decoded``, the payload decoder a task's arguments go through: the value or the
error ``json.loads`` gives, for every text (whitespace around the value, extra data,
errors, bytes, constants), and a job's payload read through it."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

import echomq
from echomq.jobs.texts import decoded
from echomq.queue.connection import Connection
from echomq.worker.context import JobContext

TEXTS: list[Any] = [
    '{"args":[1,"x"],"kwargs":{"a":null}}', '{"args": [1], "kwargs": {}}', " 1", "1 ",
    "\n[1]\n", '"\\ud800"', "[1]x", '{"a":}', "", "   ", "nul", "NaN", "-Infinity",
    b'{"a":1}', "1e400", '"\\u00e9t\\u00e9"', "[" * 10 + "]" * 10, "\ufeff{}",
]


def outcome(fn: Any, text: Any) -> tuple[str, Any]:
    try:
        value = fn(text)
    except Exception as exc:  # noqa: BLE001 - the error itself is compared
        return type(exc).__name__, str(exc)
    if isinstance(value, float) and math.isnan(value):
        return "nan", None
    return "value", value


@pytest.mark.parametrize("text", TEXTS, ids=repr)
def test_the_value_or_the_error_is_json_loads_own(text: Any) -> None:
    assert outcome(decoded, text) == outcome(json.loads, text)


def test_a_jobs_payload_is_decoded_once_on_first_use(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"args": [1, 2.5, "é"], "kwargs": {"k": [None, True]}})
    [held] = echomq.claim(conn, queue)
    job = JobContext(conn, queue, held.id, held.token, json.dumps(held.payload), 30_000,
                     None, 0.0)
    assert job.payload == {"args": [1, 2.5, "é"], "kwargs": {"k": [None, True]}}
    assert job.payload is job.payload
