"""The operator verbs the dashboard calls (issue 10), in one place.

Until issue 10's verbs are on this branch, a missing verb raises :class:`Missing` (the
page answers 501) and the reads fall back to plain ranges.
"""

from __future__ import annotations

from typing import Any

import echomq
from echomq.errors import EchoMQError
from echomq.models import Job
from echomq.queue.connection import Connection


class Missing(EchoMQError):
    """This build has no such verb yet."""


def _verb(name: str) -> Any:
    found = getattr(echomq, name, None)
    if found is None:
        raise Missing(f"echomq.{name} is not available in this build")
    return found


def is_paused(conn: Connection, queue: str) -> bool:
    found = getattr(echomq, "is_paused", None)
    return bool(found(conn, queue)) if found is not None else False


def list_jobs(conn: Connection, queue: str, state: str, *, start: int, count: int
              ) -> list[Job]:
    found = getattr(echomq, "list_jobs", None)
    if found is not None:
        return list(found(conn, queue, state, start=start, count=count, newest_first=True))
    keys = conn.keys(queue)
    ids = [str(i) for i in conn.redis.zrange(getattr(keys, state), start,
                                              start + count - 1, desc=True)]
    pipe = conn.redis.pipeline(transaction=False)
    for job_id in ids:
        pipe.hgetall(keys.job(job_id))
    return [Job.from_row(i, row) for i, row in zip(ids, pipe.execute(), strict=True) if row]


def pause(conn: Connection, queue: str) -> None:
    _verb("pause")(conn, queue)


def resume(conn: Connection, queue: str) -> None:
    _verb("resume")(conn, queue)


def retry_dead(conn: Connection, queue: str, job_ids: list[str] | None) -> int:
    return int(_verb("retry_dead")(conn, queue, job_ids))


def remove_job(conn: Connection, queue: str, job_id: str) -> None:
    _verb("remove_job")(conn, queue, job_id)


def promote(conn: Connection, queue: str, job_id: str) -> None:
    _verb("promote")(conn, queue, job_id)
