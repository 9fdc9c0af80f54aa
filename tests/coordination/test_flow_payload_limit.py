"""A parent's payload with its children's results spliced in stays within the payload
limit of the client that added the flow: past it, the parent is dead-lettered, saying
why, rather than written as a row larger than any add may make."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import echomq
from echomq.queue.connection import Connection
from tests.support.jobs import existing_job

LIMIT = 300
"""Bytes: room for a parent's own call and a few short results, not for three long ones."""


@pytest.fixture
def small(server_url: str, executor: str) -> Iterator[Connection]:
    """A connection whose payload limit is :data:`LIMIT`."""
    conn = echomq.connect(server_url, executor=executor,  # type: ignore[arg-type]
                          payload_limit=LIMIT)
    yield conn
    conn.close()


def _app(conn: Connection) -> tuple[echomq.App, str, str, Any, Any]:
    """``word`` on queue A, ``report`` on queue B."""
    a, b = f"pa-{uuid.uuid4().hex[:8]}", f"pb-{uuid.uuid4().hex[:8]}"
    app = echomq.App(conn=conn)

    @app.task(queue=a, name="word")
    def word(n: int) -> str:
        return "x" * n

    @app.task(queue=b, name="report")
    def report(results: Any, label: str = "") -> None: ...

    return app, a, b, word, report


def _run(conn: Connection, queue: str, size: int) -> list[str]:
    """Complete every pending job of ``queue`` by hand with a result of ``size`` bytes
    (a JSON string); their ids."""
    held = echomq.claim(conn, queue, count=100)
    for job in held:
        echomq.complete(conn, queue, job.id, job.token, "x" * (size - 2))
    return [job.id for job in held]


def test_a_chord_whose_results_would_pass_the_limit_is_dead_lettered(
        small: Connection) -> None:
    app, a, _, word, report = _app(small)
    here = report.s("r").set(queue=a)
    fits = echomq.chord([word.s(1), word.s(2)], then=here).enqueue(app)
    _run(small, a, 50)
    assert existing_job(small, a, fits).state == "pending"  # 2 x 50 bytes and its call: it fits
    big = [word.s(n) for n in range(3)]
    failing = echomq.chord(big, then=here).enqueue(app)
    ignoring = echomq.chord(big, then=here, on_child_failure="ignore").enqueue(app)
    _run(small, a, 100)
    for parent in (failing, ignoring):
        dead = existing_job(small, a, parent)
        assert dead.state == "dead"
        assert dead.last_error is not None and dead.last_error.startswith(
            "payload too large after its children's results: ")
        assert dead.last_error.endswith(f" bytes; the limit is {LIMIT}")
        assert dead.payload == {"args": ["r"], "kwargs": {}}  # never spliced
        assert not small.redis.exists(small.keys(a).base + f"flow:{parent}")
    assert echomq.counts(small, a).waiting == 0


def test_a_chain_step_too_large_kills_the_steps_after_it_on_any_queue(
        small: Connection) -> None:
    app, a, b, word, report = _app(small)
    last = echomq.chain(word.s(1), word.s(), report.s()).enqueue(app)  # A -> A -> B
    [first] = _run(small, a, LIMIT)  # the next step's call would hold 300 bytes and more
    [middle] = echomq.children(small, b, last)
    assert echomq.children(small, a, middle) == [first]
    assert existing_job(small, a, middle).last_error.startswith(  # type: ignore[union-attr]
        "payload too large after its children's results")
    echomq.deliver_outbox(small, a)  # the middle step's death, owed to B
    assert existing_job(small, b, last).last_error == (
        f"child {middle} failed: {existing_job(small, a, middle).last_error}")
