"""Jobs in every state for the dashboard's tests, made through the public verbs."""

from __future__ import annotations

from dataclasses import dataclass

import echomq
from echomq.queue.connection import Connection


@dataclass
class Filled:
    """The ids of one queue's jobs, by the state each was left in."""

    pending: list[str]
    done: str
    dead: str
    active: str
    active_token: int


def fill(conn: Connection, queue: str, *, pending: int = 3, error: str = "boom",
         payload: object = None, record: bool = False) -> Filled:
    """One completed, one dead (failing ``error``), one active, then ``pending`` waiting."""
    done = echomq.add(conn, queue, {"n": "done"}, job_id="done-1")
    job = echomq.claim(conn, queue)[0]
    echomq.complete(conn, queue, job.id, job.token, {"ok": True}, record=record)
    dead = echomq.add(conn, queue, payload if payload is not None else {"n": "dead"},
                      job_id="dead-1", max_attempts=1)
    job = echomq.claim(conn, queue)[0]
    echomq.fail(conn, queue, job.id, job.token, error, record=record)
    active = echomq.add(conn, queue, {"n": "active"}, job_id="active-1")
    token = echomq.claim(conn, queue, lease_ms=60_000)[0].token
    waiting = [echomq.add(conn, queue, {"n": i}, job_id=f"p-{i}") for i in range(pending)]
    return Filled(waiting, done, dead, active, token)
