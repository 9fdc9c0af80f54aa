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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import redis

from echomq.errors import EchoMQError, LeaseHeld
from echomq.queue import registry
from echomq.queue.executors import Arg, ScriptsExecutor
from echomq.queue.keys import PREFIX, Keys
from echomq.queue.replies import raise_for_reply

POLL_S = 0.05
LUA_PACKAGE = "echomq.archive"
"""The fold lease's scripts: ``echomq/archive/lua/fold_*.lua``, loaded by the one registry."""


class FoldLease:
    """A fenced lease on one queue's archive; ``wait_ms`` > 0 waits for a held one."""

    def __init__(self, client: redis.Redis, queue: str, lease_ms: int, wait_ms: int = 0,
                 token: str | None = None, url: str = "",
                 prefix: str = PREFIX) -> None:
        self.client = client
        # script-only on either executor: both run these by EVALSHA, the same path
        self._executor = ScriptsExecutor(client, url)
        self.queue = queue
        self.keys = Keys(queue, prefix)
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.token = token or uuid.uuid4().hex

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Arg]) -> int:
        reply = self._executor.run(registry.scripts(LUA_PACKAGE)[name], keys, args)
        return raise_for_reply(name, int(reply), self.queue)

    def acquire(self) -> FoldLease:
        deadline = time.monotonic() + self.wait_ms / 1000
        while True:
            try:
                self._run("fold_acquire", [self.keys.archive_lease], [self.token, self.lease_ms])
                return self
            except LeaseHeld:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(POLL_S)

    def renew(self) -> None:
        self._run("fold_renew", [self.keys.archive_lease], [self.token, self.lease_ms])

    @contextmanager
    def kept(self) -> Iterator[None]:
        """Renew the lease every third of its length while the block runs one long call
        of many requests (a listing of a million tiny objects takes a thousand pages,
        longer than a lease, and renews nothing between them). A renewal that finds the
        lease lost stops here; the next fenced step raises it."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.lease_ms / 3000):
                try:
                    self.renew()
                except (EchoMQError, redis.RedisError):
                    return

        thread = threading.Thread(target=beat, name="emq-lease-kept", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def release(self) -> bool:
        return self._run("fold_release", [self.keys.archive_lease], [self.token]) == 1

    def trim(self, minid: str, archive: str, also: str = "", *, claim: bool = False) -> int:
        """``XTRIM MINID minid`` on the stream, only while the lease is ours and only when
        ``archive`` (or ``also``) is the stream's archive of record; with ``claim``,
        ``archive`` claims an unset record (without, an unset record refuses the trim)."""
        return self._run(
            "fold_trim",
            [self.keys.archive_lease, self.keys.completions, self.keys.meta],
            [self.token, minid, self.lease_ms, archive, also, "1" if claim else "0"],
        )

    def mark(self, checkpoint: str, archive: str, also: str = "", *,
             claim: bool = False) -> bool:
        """Record ``checkpoint`` (the floor's) as the queue's ``folded`` mark, only while
        the lease is ours and ``archive`` (or ``also``) is the archive of record (claimed
        when unset only with ``claim``, as :meth:`trim`); the mark never moves backwards.
        True when it moved."""
        return self._run(
            "fold_mark", [self.keys.archive_lease, self.keys.meta],
            [self.token, checkpoint, archive, also, "1" if claim else "0"],
        ) == 1

    def __enter__(self) -> FoldLease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
