"""Issue 24: concurrent ``aio.add`` calls share round trips, and leave the rows the same
adds one by one leave (options per add, idempotent ids, errors per queue)."""

from __future__ import annotations

import asyncio
from typing import Any

import echomq
from echomq import aio
from echomq.queue.connection import Connection
from tests.aio.conftest import Runner

TIMES = {"created_at", "lease_epoch"}


def _options(i: int) -> dict[str, Any]:
    return [{}, {"priority": 4}, {"delay_ms": 60_000}, {"group": "g", "name": "grouped"},
            {"job_id": f"fixed-{i % 5}"}][i % 5]


def rows(conn: Connection, queue: str) -> list[dict[str, str]]:
    found = []
    for key in conn.redis.scan_iter(match=conn.keys(queue).base + "job:*", count=1000):
        row = conn.redis.hgetall(key)
        found.append({k: v for k, v in row.items() if k not in TIMES | {"id", "seq"}})
    return sorted(found, key=lambda r: r["payload"])


def test_concurrent_adds_share_round_trips_and_leave_the_sync_rows(
        conn: Connection, arun: Runner, queue: str) -> None:
    total = 300
    sync_q, async_q = f"{queue}-s", f"{queue}-a"
    sync_ids = [echomq.add(conn, sync_q, {"n": i}, **_options(i)) for i in range(total)]

    async def body(aconn: aio.AsyncConnection) -> tuple[list[str], int]:
        trips = 0
        executor = aconn.executor
        run, run_many = executor.run, executor.run_many

        async def counted_run(*args: Any) -> Any:
            nonlocal trips
            trips += 1
            return await run(*args)

        async def counted_many(calls: Any) -> Any:
            nonlocal trips
            trips += 1
            return await run_many(calls)

        executor.run, executor.run_many = counted_run, counted_many  # type: ignore[method-assign]
        ids = await asyncio.gather(*(aio.add(aconn, async_q, {"n": i}, **_options(i))
                                     for i in range(total)))
        return list(ids), trips

    ids, trips = arun(body)
    assert trips == 1  # one turn of the loop: every add in one pipeline
    fixed = [i for i in ids if i.startswith("fixed-")]
    assert fixed == [s for s in sync_ids if s.startswith("fixed-")]
    assert len(set(ids)) == len(set(sync_ids)) == total - total // 5 + 1  # one fixed id
    assert rows(conn, async_q) == rows(conn, sync_q)
    assert echomq.counts(conn, async_q) == echomq.counts(conn, sync_q)


def test_a_queue_being_obliterated_refuses_its_adds_not_the_others(
        conn: Connection, arun: Runner, queue: str) -> None:
    busy, calm = f"{queue}-busy", f"{queue}-calm"
    echomq.add(conn, busy, 0)
    conn.redis.hset(conn.keys(busy).meta, "obliterating", "1")
    want = _outcome(lambda: echomq.add(conn, busy, 1))

    async def body(aconn: aio.AsyncConnection) -> list[Any]:
        adds = [aio.add(aconn, busy, 1), aio.add(aconn, calm, 2), aio.add(aconn, busy, 3)]
        return list(await asyncio.gather(*adds, return_exceptions=True))

    refused, added, refused_too = arun(body)
    assert want[0] == "QueueBusy", want
    assert isinstance(refused, echomq.QueueBusy) and isinstance(refused_too, echomq.QueueBusy)
    assert added == "1" and echomq.counts(conn, calm).pending == 1


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except echomq.EchoMQError as exc:
        return type(exc).__name__, str(exc)
