"""One subscription per queue for every ``aio.wait`` on a connection.

A thread-per-wait program holds a few waits; an asyncio service may hold thousands (one
per open request). Each sync ``wait`` subscribes on a connection of its own; here the
waits of one queue share ONE :class:`~echomq.aio.listen.AsyncListener` (the pool's
connections are not spent one per wait): its reader task hands each job's end to the
waits of that job, renews the listener mark, and tells every wait to read its row again
when the subscription was dropped and made again (an end may have been missed). The hub
closes when its last wait leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from echomq.aio.listen import AsyncListener
from echomq.errors import ConnectionFailed
from echomq.queue.events import ENDS, Event

if TYPE_CHECKING:
    from echomq.aio.connection import AsyncConnection

LOST = "lost"
"""Put in every inbox when the subscription was made again: read the row again."""
Item = Event | str | BaseException


class Hub:
    """A queue's shared job-news subscription and the waits listening on it."""

    def __init__(self, conn: AsyncConnection, queue: str) -> None:
        self.conn = conn
        self.queue = queue
        self.listener = AsyncListener(conn, queue, job_news_only=True)
        self.inboxes: dict[str, set[asyncio.Queue[Item]]] = {}
        self.task: asyncio.Task[None] | None = None
        self.failed: BaseException | None = None

    async def start(self) -> None:
        await self.listener.open()
        self.task = asyncio.ensure_future(self._read())

    def join(self, job_id: str) -> asyncio.Queue[Item]:
        if self.failed is not None:
            raise self.failed
        inbox: asyncio.Queue[Item] = asyncio.Queue()
        self.inboxes.setdefault(job_id, set()).add(inbox)
        return inbox

    def leave(self, job_id: str, inbox: asyncio.Queue[Item]) -> bool:
        """Forget ``inbox``; True when no wait is left."""
        found = self.inboxes.get(job_id)
        if found is not None:
            found.discard(inbox)
            if not found:
                del self.inboxes[job_id]
        return not self.inboxes

    def _tell(self, item: Item, job_id: str | None = None) -> None:
        targets = (self.inboxes.get(job_id, ()) if job_id is not None
                   else [i for inboxes in self.inboxes.values() for i in inboxes])
        for inbox in list(targets):
            inbox.put_nowait(item)

    async def _read(self) -> None:
        try:
            while True:
                event = await self.listener.read(None)
                if event is not None:
                    if event.job_id is not None and event.kind in ENDS:
                        self._tell(event, event.job_id)
                    continue
                if self.listener.lost:
                    self.listener.lost = False
                    self._tell(LOST)
                    continue
                try:
                    await self.listener.renew()
                except ConnectionFailed as exc:
                    await self.listener.resubscribe(exc)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the subscription is gone for good: every wait hears
            self.failed = exc
            self._tell(exc)

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.listener.close()


class Hubs:
    """A connection's hubs, one per queue with waits, each started before it is used."""

    def __init__(self) -> None:
        self._hubs: dict[str, Hub] = {}
        self._lock: asyncio.Lock | None = None

    async def join(self, conn: AsyncConnection, queue: str, job_id: str
                   ) -> tuple[Hub, asyncio.Queue[Item]]:
        """The queue's hub (started and confirmed: news from now on is heard) and the
        inbox of this wait."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            hub = self._hubs.get(queue)
            if hub is None or hub.failed is not None:
                hub = Hub(conn, queue)
                await hub.start()
                self._hubs[queue] = hub
            return hub, hub.join(job_id)

    async def leave(self, hub: Hub, job_id: str, inbox: asyncio.Queue[Item]) -> None:
        if hub.leave(job_id, inbox) and self._hubs.get(hub.queue) is hub:
            del self._hubs[hub.queue]
            await hub.close()
        elif hub.failed is not None and not hub.inboxes:
            await hub.close()

    async def close(self) -> None:
        hubs, self._hubs = list(self._hubs.values()), {}
        for hub in hubs:
            await hub.close()
