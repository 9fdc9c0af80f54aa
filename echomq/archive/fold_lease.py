"""The fold lease: one driver per stream at a time, across processes and machines.

The lease is a Redis key holding a random token with a TTL on the server clock, so
drivers whose clocks disagree still agree on who holds it. Every transition that must be
fenced (renew, release, the trim itself, and the ``folded`` mark that retention reads) is
a Lua script that first checks the token is still ours: a driver that stalled past its
lease can commit to its floor (idempotent) but can never trim what another driver is
folding, nor move the mark.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from echomq.errors import EchoMQError, LeaseHeld
from echomq.queue.connection import Connection
from echomq.queue.executors import Call
from echomq.queue.transitions import folding

POLL_S = 0.05


class FoldLease:
    """A fenced lease on one queue's archive; ``wait_ms`` > 0 waits for a held one.

    Its scripts (``echomq/archive/lua/fold_*.lua``) run through the connection's executor
    (by EVALSHA on either executor), called and read through :mod:`echomq.queue.transitions`
    under ``conn.keys(queue)``, like every other call."""

    def __init__(self, conn: Connection, queue: str, lease_ms: int, wait_ms: int = 0,
                 token: str | None = None) -> None:
        self.conn = conn
        self.queue = queue
        self.keys = conn.keys(queue)
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.token = token or uuid.uuid4().hex

    def _run(self, call: Call) -> int:
        return folding.fold_answered(call[0], self.conn.executor.run(*call), self.queue)

    def acquire(self) -> FoldLease:
        deadline = time.monotonic() + self.wait_ms / 1000
        while True:
            try:
                self._run(folding.fold_acquire_call(self.keys, self.token, self.lease_ms))
                return self
            except LeaseHeld:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(POLL_S)

    def renew(self) -> None:
        self._run(folding.fold_renew_call(self.keys, self.token, self.lease_ms))

    @contextmanager
    def kept(self) -> Iterator[None]:
        """Renew the lease every third of its length while the block runs one long call
        of many requests (a listing of a million tiny objects takes a thousand pages,
        longer than a lease, and renews nothing between them). A renewal that finds the
        lease lost stops here; the next fenced step raises it."""
        stop = threading.Event()

        def keep_renewing() -> None:
            while not stop.wait(self.lease_ms / 3000):
                try:
                    self.renew()
                except (EchoMQError, redis.RedisError):
                    return

        thread = threading.Thread(target=keep_renewing, name="emq-lease-kept", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def release(self) -> bool:
        return self._run(folding.fold_release_call(self.keys, self.token)) == 1

    def trim(self, minid: str, archive: str, also: str = "", *, claim: bool = False) -> int:
        """``XTRIM MINID minid`` on the stream, only while the lease is ours and only when
        ``archive`` (or ``also``) is the stream's archive of record; with ``claim``,
        ``archive`` claims an unset record (without, an unset record refuses the trim)."""
        return self._run(folding.fold_trim_call(self.keys, self.token, minid, self.lease_ms,
                                                    archive, also, claim))

    def mark(self, checkpoint: str, archive: str, also: str = "", *,
             claim: bool = False) -> bool:
        """Record ``checkpoint`` (the floor's) as the queue's ``folded`` mark, only while
        the lease is ours and ``archive`` (or ``also``) is the archive of record (claimed
        when unset only with ``claim``, as :meth:`trim`); the mark never moves backwards.
        True when it moved."""
        return self._run(folding.fold_mark_call(self.keys, self.token, checkpoint,
                                                    archive, also, claim)) == 1

    def __enter__(self) -> FoldLease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
