"""The fold lease: one driver per stream at a time, across processes and machines.

The lease is a Redis key holding a random token with a TTL on the server clock, so
drivers whose clocks disagree still agree on who holds it. Every transition that must be
fenced (renew, release, and the trim itself) is a Lua script that first checks the token
is still ours: a driver that stalled past its lease can commit to its floor (idempotent)
but can never trim what another driver is folding.
"""

from __future__ import annotations

import time
import uuid
from functools import cache
from importlib import resources

import redis
from redis.commands.core import Script

from echomq.errors import ArchiveError, LeaseHeld, LeaseLost, NotArchiveOfRecord, NotDeclared
from echomq.queue.keys import Keys

POLL_S = 0.05


SCRIPTS = ("acquire-1", "renew-1", "release-1", "trim-3")
# One reply table: every non-success code any archive script returns, and its error.
REPLIES: dict[str, dict[int, type[ArchiveError]]] = {
    "acquire-1": {0: LeaseHeld},
    "renew-1": {-1: LeaseLost},
    "release-1": {},
    "trim-3": {-1: LeaseLost, -2: NotDeclared, -3: NotArchiveOfRecord},
}
_MESSAGES = {
    LeaseHeld: "another archive driver holds the fold lease of {q!r}",
    LeaseLost: "the fold lease of {q!r} lapsed or was taken over; nothing more is trimmed",
    NotDeclared: "the outcome stream of {q!r} is not declared; the archive never trims it",
    NotArchiveOfRecord: "the archive of record of {q!r} is one this driver does not write; "
                        "it folds but never trims",
}


@cache
def lua_source(name: str) -> str:
    return (resources.files("echomq.archive") / "lua" / f"{name}.lua").read_text()


def raise_for_reply(script: str, code: int, queue: str) -> int:
    """Map a script's reply to its error (the only place that does); pass successes on."""
    error = REPLIES[script].get(code)
    if error is not None:
        raise error(_MESSAGES[error].format(q=queue))
    return code


class FoldLease:
    """A fenced lease on one queue's archive; ``wait_ms`` > 0 waits for a held one."""

    def __init__(self, client: redis.Redis, queue: str, lease_ms: int, wait_ms: int = 0,
                 token: str | None = None) -> None:
        self.client = client
        self.queue = queue
        self.keys = Keys(queue)
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.token = token or uuid.uuid4().hex
        self._scripts: dict[str, Script] = {}

    def _run(self, name: str, keys: list[str], args: list[str | int]) -> int:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self.client.register_script(lua_source(name))
        return raise_for_reply(name, int(script(keys=keys, args=args)), self.queue)

    def acquire(self) -> FoldLease:
        deadline = time.monotonic() + self.wait_ms / 1000
        while True:
            try:
                self._run("acquire-1", [self.keys.archive_lease], [self.token, self.lease_ms])
                return self
            except LeaseHeld:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(POLL_S)

    def renew(self) -> None:
        self._run("renew-1", [self.keys.archive_lease], [self.token, self.lease_ms])

    def release(self) -> bool:
        return self._run("release-1", [self.keys.archive_lease], [self.token]) == 1

    def trim(self, minid: str, archive: str, also: str = "") -> int:
        """``XTRIM MINID minid`` on the stream, only while the lease is ours and only when
        ``archive`` (or ``also``) is the stream's archive of record; ``archive`` claims an
        unset record."""
        return self._run(
            "trim-3",
            [self.keys.archive_lease, self.keys.completions, self.keys.meta],
            [self.token, minid, self.lease_ms, archive, also],
        )

    def __enter__(self) -> FoldLease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
