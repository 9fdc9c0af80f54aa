"""Concurrent ``aio.add`` calls sent together: what coroutines add in one turn of the
event loop leaves in ONE round trip.

A thread-per-request producer makes one round trip per add; fifty coroutines adding at
once would make fifty, each paying the client's per-command cost on the one event loop
thread. Here each ``add`` (its gates passed, before the wire) joins the batch of the
current turn; at the end of the turn the batch is sent as ``add`` calls (one per queue
and options, up to ``BATCH`` jobs each; the same ``add-2.lua`` call ``add_many`` sends)
in one pipeline, and each add gets its own id back. Rows are those of the same adds
one by one, in the order they were made; ``add-2.lua`` refuses only a whole queue (being
obliterated), which refuses every add of that queue alike.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from echomq.queue.enqueue import BATCH
from echomq.queue.executors import Call
from echomq.queue.keys import Keys
from echomq.queue.transitions import intake

if TYPE_CHECKING:
    from echomq.aio.connection import AsyncConnection

Group = tuple[Keys, list[tuple[tuple[str, str], "asyncio.Future[str]"]]]


class AddBatch:
    """The adds of the current turn of the loop, by queue and options."""

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn
        self._groups: dict[tuple[str, tuple[Any, ...]], Group] = {}
        self._sending: set[asyncio.Task[None]] = set()
        """The round trips in flight, held so none is collected before it ends."""

    def add(self, keys: Keys, options: list[str | int], job: tuple[str, str]
            ) -> asyncio.Future[str]:
        """``job`` (``(id or "", payload JSON)``) joins this turn's batch; its id later."""
        loop = asyncio.get_running_loop()
        if not self._groups:
            loop.call_soon(self._flush)
        found: asyncio.Future[str] = loop.create_future()
        group = self._groups.setdefault((keys.base, tuple(options)), (keys, []))
        group[1].append((job, found))
        return found

    def _flush(self) -> None:
        groups, self._groups = self._groups, {}
        calls: list[Call] = []
        owners: list[list[asyncio.Future[str]]] = []
        for (_, options), (keys, entries) in groups.items():
            for start in range(0, len(entries), BATCH):
                chunk = entries[start:start + BATCH]
                calls.append(intake.add_call(keys, list(options), [j for j, _ in chunk]))
                owners.append([f for _, f in chunk])
        sending = asyncio.ensure_future(self._send(calls, owners))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _send(self, calls: list[Call], owners: list[list[asyncio.Future[str]]]
                    ) -> None:
        executor = self.conn.executor
        try:
            if len(calls) == 1:
                replies: list[Any] = [await executor.run(*calls[0])]
            else:
                replies = await executor.run_many(calls)
        except BaseException as exc:  # the round trip failed: every add in it did
            for futures in owners:
                _fail(futures, exc)
            if not isinstance(exc, Exception):
                raise
            return
        for reply, futures in zip(replies, owners, strict=True):
            if isinstance(reply, BaseException):
                _fail(futures, reply)
                continue
            for found, job_id in zip(futures, intake.added(reply), strict=True):
                if not found.done():
                    found.set_result(job_id)


def _fail(futures: list[asyncio.Future[str]], exc: BaseException) -> None:
    for found in futures:
        if not found.done():
            found.set_exception(exc)
