"""Delivery of flow outcomes across queues: a child settled here whose parent is on another
queue left its outcome in its queue's ``flow_outbox`` (same script as the settle); this
sends it to ``flow_ack`` on the parent's slot (``queue/flows_across.py``).

Two deliverers: the settler right after each settle round (quick: the parent starts
without waiting for a beat), and the beat's fallback, which drains every outbox of the
worker's queues, so a worker killed between its settle and the delivery is made good by
any worker of the child's queue (a repeated ack is a no-op). Only queues marked as
holding such children (``xflows``, set by their first add) are drained; the mark is read
again at most once a second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import redis

from echomq.errors import EchoMQError
from echomq.queue.connection import Connection

log = logging.getLogger("echomq.consumer")

REFRESH_S = 1.0
"""How often the settler reads the queues' marks again."""


class FlowAcks:
    """The outboxes of one worker's queues: the settler and the beat hold one each (two
    drains at once only send acks twice, which changes nothing)."""

    def __init__(self, conn: Connection, queues: Sequence[str]) -> None:
        self.conn = conn
        self.queues = list(queues)
        self.marked: list[str] = []
        self._read_at = -REFRESH_S

    def after_settle(self) -> None:
        """The settler's delivery: the marked queues' outboxes; a failure is left to the
        beat's fallback."""
        if time.monotonic() - self._read_at >= REFRESH_S:
            self._refresh()
        self._drain()

    def sweep(self) -> None:
        """The beat's fallback: read the marks, drain every marked outbox."""
        self._refresh()
        self._drain()

    def _refresh(self) -> None:
        try:
            self.marked = self._crossing()
        except (EchoMQError, redis.RedisError) as exc:
            log.warning("flow outboxes: could not read the marks: %s", exc)
        self._read_at = time.monotonic()

    def _crossing(self) -> list[str]:
        """Those of the queues that ever held a child of a parent on another queue (the mark
        their first such add sets), in one round trip: only their outboxes need draining."""
        pipe = self.conn.redis.pipeline(transaction=False)
        for queue in self.queues:
            pipe.hget(self.conn.keys(queue).meta, "xflows")
        return [q for q, mark in zip(self.queues, pipe.execute(), strict=True) if mark == "1"]

    def _drain(self) -> None:
        if not self.marked:
            return
        # flows load only for a marked queue: a plain worker's start never builds them
        from echomq.queue.flows_across import deliver_outbox

        for queue in self.marked:
            try:
                deliver_outbox(self.conn, queue)
            except (EchoMQError, redis.RedisError) as exc:
                log.warning("flow outbox of %r: delivery failed (the beat retries): %s",
                            queue, exc)
