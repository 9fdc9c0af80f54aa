"""Listening to a queue: ``events`` (typed, at most once) and the subscription under it.

A :class:`Listener` sets the queue's listener mark, subscribes, and returns only once
the server confirmed the subscription: from then on every settle of the queue
publishes its news, and this listener hears it. The mark has a TTL that the listener
renews every :data:`~echomq.queue.events.RENEW_S` while it is read; a listener that
died lets it lapse, and the queue's settles stop publishing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import redis

from echomq.errors import ConnectionFailed
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.events import LISTEN_TTL_MS, RENEW_S, Event

CONFIRM_S = 5.0
"""How long a subscription may take to be confirmed before we give up."""
RESUBSCRIBE_FIRST_S = 0.1
RESUBSCRIBE_MOST_S = 2.0
"""The pauses between attempts to subscribe again after the server went away."""

log = logging.getLogger("echomq.events")


def mark_listening(conn: Connection, queue: str) -> None:
    """Set (or renew) the listener mark of ``queue``: settles publish while it lives."""
    conn.redis.set(conn.keys(queue).listeners, "1", px=LISTEN_TTL_MS)


class Listener:
    """One confirmed subscription to a queue's channels, its mark set first."""

    def __init__(self, conn: Connection, queue: str, *, job_news_only: bool = False) -> None:
        self.keys = conn.keys(queue)
        self._conn = conn
        channels = [self.keys.job_events]
        if not job_news_only:
            channels.insert(0, self.keys.events)
        self.renew()  # first: a settle after the confirmation below sees the mark
        self._pubsub: Any = conn.redis.pubsub()  # type: ignore[no-untyped-call]
        try:
            self._pubsub.subscribe(*channels)
            self._confirm(len(channels))
        except BaseException:
            self.close()
            raise

    def _confirm(self, expected: int) -> None:
        until = time.monotonic() + CONFIRM_S
        confirmed = 0
        while confirmed < expected:
            left = until - time.monotonic()
            if left <= 0:
                raise ConnectionFailed(f"the subscription to {self.keys.queue!r}'s events "
                                       f"was not confirmed within {CONFIRM_S:g}s")
            message = self._get(left)
            if message is not None and message.get("type") == "subscribe":
                confirmed += 1

    def _get(self, timeout: float) -> dict[str, Any] | None:
        try:
            message: dict[str, Any] | None = self._pubsub.get_message(timeout=timeout)
        except redis.ConnectionError as exc:
            raise ConnectionFailed(f"lost the event subscription: {exc}") from exc
        return message

    def renew(self, row: str | None = None) -> bool:
        """Renew the mark (and set the next renewal); with ``row``, in the same round trip,
        whether that key still exists (``wait`` learns of a removed job this way)."""
        pipe = self._conn.redis.pipeline(transaction=False)
        pipe.set(self.keys.listeners, "1", px=LISTEN_TTL_MS)
        if row is not None:
            pipe.exists(row)
        try:
            replies = pipe.execute()
        except redis.ConnectionError as exc:
            raise ConnectionFailed(f"lost the server while listening: {exc}") from exc
        self._renew_at = time.monotonic() + RENEW_S
        return row is None or bool(replies[1])

    def read(self, until: float | None) -> Event | None:
        """The next known, well-formed event; None once ``until`` (monotonic) passes or
        a renewal is due, whichever comes first (the caller then renews or stops)."""
        while True:
            stop = self._renew_at if until is None else min(until, self._renew_at)
            left = stop - time.monotonic()
            if left <= 0:
                return None
            message = self._get(left)
            if message is None or message.get("type") != "message":
                continue
            event = Event.typed(message["data"])
            if event is not None:
                return event

    def close(self) -> None:
        """Unsubscribe and give the connection back; the mark lapses on its own (another
        listener may still rely on it)."""
        pubsub = getattr(self, "_pubsub", None)
        if pubsub is not None:
            self._pubsub = None
            try:
                pubsub.unsubscribe()
            except redis.RedisError:
                pass  # a lost connection unsubscribed already
            finally:
                pubsub.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class EventStream(Iterator[Event]):
    """The iterator ``events`` returns: subscribed when created, closed when exhausted,
    on ``close()`` or at the end of a ``with`` block."""

    def __init__(self, conn: Connection, queue: str, *, count: int | None = None,
                 timeout_s: float | None = None) -> None:
        self._left = None if count is None else validate.positive_int(count, "count")
        self._deadline = None if timeout_s is None else (
            time.monotonic() + validate.positive_seconds(timeout_s, "timeout_s"))
        self._conn, self._queue = conn, queue
        self._listener: Listener | None = Listener(conn, queue)

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> Event:
        while self._listener is not None and self._left != 0:
            try:
                event = self._listener.read(self._deadline)
                if event is None and not self._past_deadline():
                    self._listener.renew()
            except ConnectionFailed as exc:
                if not self._subscribe_again(exc):
                    break
                continue
            if event is not None:
                if self._left is not None:
                    self._left -= 1
                return event
            if self._past_deadline():
                break
        self.close()
        raise StopIteration

    def _past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def _subscribe_again(self, lost: ConnectionFailed) -> bool:
        """The server went away (a restart, a failover): subscribe again once it is back,
        retrying with a growing pause until the deadline, if any (False then). Events
        published meanwhile are gone, as the at-most-once promise says."""
        log.warning("%s; subscribing again when the server is back", lost)
        if self._listener is not None:
            self._listener.close()
        pause = RESUBSCRIBE_FIRST_S
        while not self._past_deadline():
            try:
                self._listener = Listener(self._conn, self._queue)
            except (ConnectionFailed, redis.ConnectionError, redis.TimeoutError):
                time.sleep(pause if self._deadline is None
                           else min(pause, max(0.0, self._deadline - time.monotonic())))
                pause = min(pause * 2, RESUBSCRIBE_MOST_S)
                continue
            log.warning("subscribed again to %r's events", self._queue)
            return True
        self._listener = None
        return False

    def close(self) -> None:
        """Stop listening: unsubscribe now (idempotent)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    @property
    def closed(self) -> bool:
        return self._listener is None

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def events(conn: Connection, queue: str, *, count: int | None = None,
           timeout_s: float | None = None) -> EventStream:
    """Typed events of ``queue`` as they happen, at most once (pub/sub): ``added``,
    ``paused``, ``resumed``, ``cancel`` requests, ``progress`` (job and value), and the
    settles ``completed``, ``cancelled``, ``failed`` (a retry is scheduled) and ``dead``.

    Subscribed before it returns; unknown or malformed messages are skipped. It ends
    after ``count`` events or ``timeout_s`` seconds (either optional), or on
    ``close()``: use it in a ``with`` block. While it is read, settles publish their
    news; an event missed while disconnected or not read for longer than the mark's
    TTL (20 s) is lost. A server that goes away (a restart, a failover) is waited for:
    the stream subscribes again once it is back (a warning is logged each way).
    """
    return EventStream(conn, queue, count=count, timeout_s=timeout_s)
