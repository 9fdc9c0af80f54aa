"""Issue 24: the conformance scenario (``tests/queue/test_conformance.py``) through ``aio``.

The same steps run three times on fresh queues: once through the sync verbs and
executor, then once per executor with every transition sent by the asyncio executor
(``echomq.aio.executors``, on an event loop thread) and every producer step (``add``,
``add_many``, ``get_job``, ``cancel.request``) through its ``aio`` verb. Each step's reply,
the news it published and the queue's keyspace after it must be the sync run's.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import pytest

import echomq
from echomq import aio
from echomq.queue import registry
from echomq.queue.executors import Arg, Call
from tests.queue.test_conformance import Record, scenario

T = TypeVar("T")


class LoopThread:
    """An event loop on a thread of its own: sync code runs coroutines on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Bridge:
    """The sync executor's face, every call sent by an ``aio`` executor."""

    def __init__(self, loop: LoopThread, aconn: aio.AsyncConnection) -> None:
        self.loop = loop
        self.aconn = aconn

    def run(self, transition: str | registry.Transition, keys: Sequence[str],
            args: Sequence[Arg]) -> Any:
        return self.loop.run(self.aconn.executor.run(transition, keys, args))

    def run_many(self, calls: list[Call]) -> list[Any]:
        return self.loop.run(self.aconn.executor.run_many(calls))


def noting(aconn: aio.AsyncConnection, called: set[str]) -> None:
    """Note the name of every transition ``aconn``'s executor sends."""
    executor = aconn.executor
    run, run_many = executor.run, executor.run_many

    async def noted_run(transition: Any, keys: Any, args: Any) -> Any:
        called.add(transition if isinstance(transition, str) else transition.name)
        return await run(transition, keys, args)

    async def noted_many(calls: list[Call]) -> list[Any]:
        called.update(name for name, _, _ in calls)
        return await run_many(calls)

    executor.run = noted_run  # type: ignore[method-assign]
    executor.run_many = noted_many  # type: ignore[method-assign]


def producer_verbs_through_aio(patch: pytest.MonkeyPatch, loop: LoopThread,
                               aconn: aio.AsyncConnection) -> None:
    """The scenario's producer steps (``echomq.add`` ...) sent by their ``aio`` verbs."""
    patch.setattr(echomq, "add", lambda c, q, *a, **k: loop.run(aio.add(aconn, q, *a, **k)))
    patch.setattr(echomq, "add_many", lambda c, q, *a, **k: loop.run(
        aio.add_many(aconn, q, *a, **k)))
    patch.setattr(echomq, "get_job", lambda c, q, i: loop.run(aio.get_job(aconn, q, i)))
    patch.setattr(echomq.cancel, "request", lambda c, q, i, r=None: loop.run(
        aio.cancel_request(aconn, q, i, reason=r)))


@pytest.fixture(scope="module")
def runs(server_url: str) -> Iterator[dict[str, Record]]:
    tag = uuid.uuid4().hex[:10]
    loop = LoopThread()
    out: dict[str, Record] = {}
    opened: list[Any] = []
    try:
        sync_conn = echomq.connect(server_url)
        opened.append(sync_conn)
        out["sync"] = scenario(sync_conn, f"aconf-sync-{tag}")
        for name in ("scripts", "functions"):
            conn = echomq.connect(server_url, executor=name)  # type: ignore[arg-type]
            aconn = loop.run(aio.connect(server_url, executor=name))  # type: ignore[arg-type]
            opened.append(conn)
            called: set[str] = set()
            noting(aconn, called)
            conn._executor = Bridge(loop, aconn)  # type: ignore[assignment]
            with pytest.MonkeyPatch.context() as patch:
                producer_verbs_through_aio(patch, loop, aconn)
                out[name] = scenario(conn, f"aconf-{name}-{tag}")
            out[name].named["called"] = ",".join(sorted(called))
            loop.run(aconn.close())
        yield out
    finally:
        for rec in out.values():
            if rec._pubsub is not None:
                rec._pubsub.close()
        for conn in opened:
            conn.close()
        loop.close()


@pytest.mark.parametrize("executor_name", ["scripts", "functions"])
def test_aio_runs_every_transition(runs: dict[str, Record], executor_name: str) -> None:
    called = set(runs[executor_name].named["called"].split(","))
    assert called == set(registry.transitions())


@pytest.mark.parametrize("executor_name", ["scripts", "functions"])
def test_aio_gives_the_sync_replies_news_and_keyspace(runs: dict[str, Record],
                                                      executor_name: str) -> None:
    want, got = runs["sync"], runs[executor_name]
    assert [s[0] for s in got.steps] == [s[0] for s in want.steps]
    for (label, reply, keyspace), (_, got_reply, got_keyspace) in zip(
            want.steps, got.steps, strict=True):
        assert got_reply == reply, label
        assert got_keyspace == keyspace, label
    assert got.news == want.news
    assert got.steps[-1][2] == {}  # obliterated: not one key left
