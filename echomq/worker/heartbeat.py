"""A worker's heartbeat record: who it is and what it holds, written on its beat.

The record rides in the round trip of the beat's lease renewal (``worker_beat-2.lua``
beside the ``extend_lock`` calls, one pipeline), so a worker holding jobs pays no extra
round trip for it, and an idle one pays one per beat. It says: host, pid, the queues and
(an App's) tasks, concurrency, the held jobs (the first :data:`LISTED` and their count),
the beat and the echomq version; the server stamps its start and its last beat. A stop
removes it (:meth:`Heartbeat.leave`); a killed worker's record shows it gone, then lapses
(:mod:`echomq.queue.workers`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Iterable, Sequence
from functools import cache

import redis

from echomq.errors import EchoMQError
from echomq.queue.connection import Connection
from echomq.queue.executors import Call
from echomq.queue.transitions import heartbeat
from echomq.queue.transitions.heartbeat import KEEP_BEATS, LISTED

log = logging.getLogger("echomq.consumer")

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@cache
def _version() -> str:
    """The echomq version (as ``echomq.__version__`` reads it), looked up on the first beat."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("echomq")
    except PackageNotFoundError:
        return "0+unknown"


def new_worker_id(host: str, pid: int) -> str:
    """``<host>.<pid>.<random>``: readable, unique, and a usable key part."""
    return f"{_UNSAFE.sub('_', host)[:100]}.{pid}.{secrets.token_hex(4)}"


class Heartbeat:
    """One worker's record: its fixed description, and the call a beat sends."""

    def __init__(self, conn: Connection, queues: Sequence[str], concurrency: int,
                 beat_ms: int, kind: str = "consumer") -> None:
        self.conn = conn
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = new_worker_id(self.host, self.pid)
        self.beat_ms = beat_ms
        self.keep_ms = beat_ms * KEEP_BEATS
        self.kind = kind
        self.queues = list(queues)
        self.tasks: list[str] = []
        self.concurrency = concurrency
        self.parent_pid: int | None = None
        self.written = False
        self._next = 0.0

    def describe(self, *, kind: str | None = None, tasks: Iterable[str] | None = None,
                 parent_pid: int | None = None, concurrency: int | None = None) -> None:
        """What a layer above the Consumer knows of it: an App's tasks, a child's parent,
        a supervisor's kind and its children's slots."""
        if kind is not None:
            self.kind = kind
        if concurrency is not None:
            self.concurrency = concurrency
        if tasks is not None:
            self.tasks = sorted(tasks)
        if parent_pid is not None:
            self.parent_pid = parent_pid

    def call(self, held: Sequence[tuple[str, str, int]]) -> Call:
        """The beat's write: the record with ``held`` as (queue, id, token) triples."""
        fields: dict[str, str | int] = {
            "kind": self.kind, "host": self.host, "pid": self.pid,
            "parent_pid": self.parent_pid or 0,
            "queues": json.dumps(self.queues[:LISTED]), "queue_count": len(self.queues),
            "tasks": json.dumps(self.tasks[:LISTED]), "concurrency": self.concurrency,
            "held": json.dumps([list(h) for h in held[:LISTED]]), "held_count": len(held),
            "beat_ms": self.beat_ms, "version": _version(),
        }
        return heartbeat.beat_call(self.conn.prefix, self.id, self.keep_ms, fields)

    def wrote(self, reply: object) -> None:
        """A beat's answer: a failure is logged (the leases beside it still count)."""
        error = heartbeat.beaten(reply)
        if error is None:
            self.written = True
        else:
            log.warning("worker %s: heartbeat record not written: %s", self.id, error)

    def beat(self, held: Sequence[tuple[str, str, int]]) -> None:
        """Write the record alone (a beat with no lease to renew beside it)."""
        self.wrote(self.conn.executor.run_many([self.call(held)])[0])

    def due(self) -> bool:
        """Whether a beat is due (for a loop that is not the Consumer's beat thread, an
        App supervisor's): True at most once a beat."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.beat_ms / 1000
        return True

    def leave(self) -> None:
        """A graceful stop: the record goes at once (a server gone: it lapses)."""
        if not self.written:
            return
        try:
            heartbeat.left(self.conn.executor.run(*heartbeat.leave_call(self.conn.prefix,
                                                                        self.id)))
        except (EchoMQError, redis.RedisError) as exc:
            log.warning("worker %s: heartbeat record left to lapse: %s", self.id, exc)
        self.written = False



def leave(record: Heartbeat | None) -> None:
    """:meth:`Heartbeat.leave` when there is a record (a worker may keep none)."""
    if record is not None:
        record.leave()


def heartbeat_of(wanted: bool, conn: Connection, queues: Sequence[str], concurrency: int,
                 beat_ms: int) -> Heartbeat | None:
    """A Consumer's record (``Consumer(heartbeat=False)``: none, and no write on its beat)."""
    return Heartbeat(conn, queues, concurrency, beat_ms) if wanted else None
