"""Listening to a queue on asyncio: ``aio.events`` and the subscription under it.

The sync :class:`echomq.queue.listen.Listener`'s protocol, awaited: the listener mark
is set (and renewed every :data:`~echomq.queue.events.RENEW_S`) before the subscription,
which is confirmed before anything is read; messages become typed events through the
same :meth:`Event.typed <echomq.queue.events.Event.typed>`. One difference, for a
long-lived service: a dropped subscription (a server restart, a proxy, ``CLIENT KILL``)
is subscribed again, with backoff, for up to :data:`RECONNECT_S`; what was published
in between is lost (pub/sub is at most once) and :attr:`AsyncListener.lost` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import redis

from echomq.errors import ConnectionFailed
from echomq.queue import validate
from echomq.queue.events import LISTEN_TTL_MS, RENEW_S, Event
from echomq.queue.listen import CONFIRM_S

if TYPE_CHECKING:
    from echomq.aio.connection import AsyncConnection

RECONNECT_S = 30.0
"""How long a dropped subscription is tried again before ``ConnectionFailed``."""
_DROPPED = (redis.ConnectionError, redis.TimeoutError, ConnectionFailed, OSError)


class AsyncListener:
    """One confirmed subscription to a queue's channels, its mark set first."""

    def __init__(self, conn: AsyncConnection, queue: str, *,
                 job_news_only: bool = False) -> None:
        self.keys = conn.keys(queue)
        self._conn = conn
        self._channels = [self.keys.job_events]
        if not job_news_only:
            self._channels.insert(0, self.keys.events)
        self._pubsub: Any = None
        self._renew_at = 0.0
        self.lost = False
        """True once a dropped subscription was made again: news may have been missed."""

    async def open(self) -> AsyncListener:
        await self.renew()  # first: a settle after the confirmation sees the mark
        await self._subscribe()
        return self

    async def _subscribe(self) -> None:
        self._pubsub = self._conn.redis.pubsub()
        try:
            await self._pubsub.subscribe(*self._channels)
            until = time.monotonic() + CONFIRM_S
            confirmed = 0
            while confirmed < len(self._channels):
                left = until - time.monotonic()
                if left <= 0:
                    raise ConnectionFailed(
                        f"the subscription to {self.keys.queue!r}'s events was not "
                        f"confirmed within {CONFIRM_S:g}s")
                message = await self._pubsub.get_message(timeout=left)
                if message is not None and message.get("type") == "subscribe":
                    confirmed += 1
        except BaseException:
            await self._drop()
            raise

    async def resubscribe(self, cause: BaseException) -> None:
        """Subscribe again after ``cause`` dropped the subscription, with backoff, for up
        to :data:`RECONNECT_S`; then ``ConnectionFailed``."""
        await self._drop()
        self.lost = True
        give_up = time.monotonic() + RECONNECT_S
        pause = 0.05
        while True:
            try:
                await self.renew()
                await self._subscribe()
                return
            except _DROPPED as exc:
                cause = exc
            if time.monotonic() + pause > give_up:
                raise ConnectionFailed(f"lost the event subscription to "
                                       f"{self.keys.queue!r}: {cause}") from cause
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    @property
    def renewal_due(self) -> bool:
        """True once the mark should be renewed (every :data:`RENEW_S`)."""
        return time.monotonic() >= self._renew_at

    async def renew(self, row: str | None = None) -> bool:
        """Renew the mark (and set the next renewal); with ``row``, in the same round trip,
        whether that key still exists."""
        pipe = self._conn.redis.pipeline(transaction=False)
        pipe.set(self.keys.listeners, "1", px=LISTEN_TTL_MS)
        if row is not None:
            pipe.exists(row)
        try:
            replies = await pipe.execute()
        except redis.ConnectionError as exc:
            raise ConnectionFailed(f"lost the server while listening: {exc}") from exc
        self._renew_at = time.monotonic() + RENEW_S
        return row is None or bool(replies[1])

    async def read(self, until: float | None) -> Event | None:
        """The next known, well-formed event; None once ``until`` (monotonic) passes, a
        renewal is due, or the subscription was made again (:attr:`lost`)."""
        while True:
            stop = self._renew_at if until is None else min(until, self._renew_at)
            left = stop - time.monotonic()
            if left <= 0:
                return None
            try:
                message = await self._pubsub.get_message(timeout=left)
            except _DROPPED as exc:
                await self.resubscribe(exc)
                return None
            if message is None:
                continue
            if message.get("type") == "subscribe":  # redis-py subscribed again on its own
                self.lost = True
                return None
            if message.get("type") != "message":
                continue
            event = Event.typed(message["data"])
            if event is not None:
                return event

    async def _drop(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                await pubsub.unsubscribe()
            with contextlib.suppress(redis.RedisError, OSError):
                await pubsub.aclose()

    async def close(self) -> None:
        """Unsubscribe and give the connection back; the mark lapses on its own."""
        await self._drop()


class AsyncEventStream(AsyncIterator[Event]):
    """What ``aio.events`` returns: ``async for event in stream``; subscribed on the first
    step (or ``async with``), closed when exhausted, on ``aclose()`` or leaving the block."""

    def __init__(self, conn: AsyncConnection, queue: str, *, count: int | None = None,
                 timeout_s: float | None = None) -> None:
        conn.keys(queue)  # the gate, before the wire
        self._left = None if count is None else validate.positive_int(count, "count")
        self._limit = None if timeout_s is None else validate.positive_seconds(
            timeout_s, "timeout_s")
        self._deadline: float | None = None
        self._listener: AsyncListener | None = AsyncListener(conn, queue)
        self._opened = False

    async def open(self) -> AsyncEventStream:
        """Subscribe now (the first step does it otherwise): events after this are heard."""
        if not self._opened and self._listener is not None:
            self._opened = True
            if self._limit is not None:
                self._deadline = time.monotonic() + self._limit
            await self._listener.open()
        return self

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> Event:
        await self.open()
        while self._listener is not None and self._left != 0:
            event = await self._listener.read(self._deadline)
            if event is not None:
                if self._left is not None:
                    self._left -= 1
                return event
            if self._deadline is not None and time.monotonic() >= self._deadline:
                break
            if self._listener.renewal_due:
                try:
                    await self._listener.renew()
                except ConnectionFailed as exc:
                    await self._listener.resubscribe(exc)
        await self.aclose()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop listening: unsubscribe now (idempotent)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()

    @property
    def closed(self) -> bool:
        return self._listener is None

    async def __aenter__(self) -> AsyncEventStream:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def events(conn: AsyncConnection, queue: str, *, count: int | None = None,
           timeout_s: float | None = None) -> AsyncEventStream:
    """:func:`echomq.events`, for ``async for``: typed events of ``queue`` as they happen,
    at most once. It ends after ``count`` events or ``timeout_s`` seconds (either
    optional), or on ``aclose()``; ``async with aio.events(conn, q) as stream:`` subscribes
    before the block's body runs. A dropped connection is subscribed again (events
    published meanwhile are lost)."""
    return AsyncEventStream(conn, queue, count=count, timeout_s=timeout_s)
