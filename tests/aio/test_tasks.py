"""Issue 24: ``task.aenqueue`` and ``aenqueue_with`` on the App's asyncio connection,
reaching a sync worker; the same rows and the same refusals as ``enqueue_with``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import echomq
from echomq.queue.connection import Connection
from tests.app.conftest import Workers
from tests.support.waits import wait_until

TIMES = {"created_at", "claimed_at", "finished_at", "lease_epoch"}


@pytest.fixture
def workers() -> Iterator[Workers]:
    found = Workers()
    yield found
    found.stop_all()


def test_aenqueue_reaches_a_sync_worker(conn: Connection, workers: Workers) -> None:
    app = echomq.App(conn=conn)
    queue = f"mail-{uuid.uuid4().hex[:8]}"

    @app.task(queue=queue)
    def send(to: str, subject: str = "") -> str:
        return f"{to}/{subject}"

    async def produce() -> list[str]:
        first = await send.aenqueue("a@b", subject="hi")
        second = await send.aenqueue_with(args=("c@d",), kwargs={"subject": "x"},
                                          job_id="fixed", priority=3)
        assert (await app.aconn()).prefix == conn.prefix
        await app.aclose()
        return [first, second]

    async def again() -> str:  # another loop: another connection, closed with it
        try:
            return await send.aenqueue("e@f")
        finally:
            await app.aclose()

    ids = asyncio.run(produce())
    assert ids[1] == "fixed"
    ids.append(asyncio.run(again()))
    workers.start(app, [queue])
    wait_until(lambda: all(echomq.get_job(conn, queue, i).state == "completed" for i in ids))
    results = [echomq.get_job(conn, queue, i).raw["result"] for i in ids]
    assert results == ['"a@b/hi"', '"c@d/x"', '"e@f/"']


def test_aenqueue_with_writes_the_row_enqueue_with_writes(conn: Connection,
                                                         queue: str) -> None:
    app = echomq.App(conn=conn)

    @app.task(queue=queue, max_attempts=5, priority=2, name="rows.task")
    def task(n: int) -> int:
        return n

    options: list[dict[str, Any]] = [
        {}, {"delay_ms": 60_000}, {"priority": 7, "group": "g"},
        {"max_attempts": 2, "backoff": echomq.Fixed(delay_ms=10), "timeout_s": 3.0},
        {"queue": f"{queue}-other"}]
    sync_ids = [task.enqueue_with(args=(i,), **o) for i, o in enumerate(options)]

    async def produce() -> list[str]:
        try:
            return [await task.aenqueue_with(args=(i,), **o) for i, o in enumerate(options)]
        finally:
            await app.aclose()

    async_ids = asyncio.run(produce())
    for o, sync_id, async_id in zip(options, sync_ids, async_ids, strict=True):
        q = o.get("queue", queue)
        want, got = (echomq.get_job(conn, q, i) for i in (sync_id, async_id))
        assert want is not None and got is not None
        assert ({k: v for k, v in got.raw.items() if k not in TIMES | {"id", "seq"}}
                == {k: v for k, v in want.raw.items() if k not in TIMES | {"id", "seq"}})


def test_aenqueue_refuses_what_enqueue_refuses_before_the_wire(conn: Connection,
                                                               queue: str) -> None:
    app = echomq.App(conn=conn)

    @app.task(queue=queue)
    def task(*args: Any, **kwargs: Any) -> None:
        return None

    cases: list[dict[str, Any]] = [
        {"args": ({1j},)}, {"kwargs": {"x": object()}}, {"job_id": "a:b"},
        {"delay_ms": -1}, {"max_attempts": 0}, {"backoff": 3}, {"timeout_s": -1},
        {"queue": "bad queue"}]

    def refusal(call: Any) -> tuple[str, str]:
        try:
            call()
        except echomq.EchoMQError as exc:
            return type(exc).__name__, str(exc)
        raise AssertionError("not refused")

    wants = [refusal(lambda c=c: task.enqueue_with(**c)) for c in cases]

    async def produce() -> list[tuple[str, str]]:
        out = []
        for case in cases:
            try:
                await task.aenqueue_with(**case)
            except echomq.EchoMQError as exc:
                out.append((type(exc).__name__, str(exc)))
            else:
                raise AssertionError(f"{case} not refused")
        await app.aclose()
        return out

    assert asyncio.run(produce()) == wants
    assert echomq.counts(conn, queue).pending == 0
