"""Replay: enqueue an archived job again, from the floor alone.

A queue declared with ``payload=True`` records each job's name and payload with its
outcome, so the archive can re-run a job long after Redis forgot it. The new job is an
ordinary job with a fresh id that names its origin (``replay_of = "<queue>/<id>"`` on its
row, ``Job.replay_of``); it takes the payload of the job's LAST archived outcome.
"""

from __future__ import annotations

import os
from pathlib import Path

from echomq.archive.floor import Floor
from echomq.errors import JobNotArchived, PayloadNotRecorded, PayloadUnreadable
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.enqueue import DEFAULT_MAX_ATTEMPTS, option_args
from echomq.queue.transitions import intake


def replay(conn: Connection, floor: Floor | str | os.PathLike[str], queue: str, job_id: str,
           *, to_queue: str | None = None) -> str:
    """Enqueue ``job_id``'s archived payload on ``to_queue`` (default ``queue``) as a new
    job and return its id.

    Raises :class:`JobNotArchived` when the floor has no outcome of the job and
    :class:`PayloadNotRecorded` when its last outcome was recorded without the payload,
    :class:`PayloadUnreadable` when what was recorded is not JSON.
    """
    target = queue if to_queue is None else to_queue
    keys = conn.keys(target)  # the gates, before anything is read
    conn.keys(queue).job(job_id)
    if isinstance(floor, Floor):
        history = floor.history(queue, job_id)
    else:
        if not Path(floor, "data.mdb").exists():
            raise JobNotArchived(f"no floor at {os.fspath(floor)!r}: nothing of "
                                 f"{queue}/{job_id} is archived there")
        with Floor(floor) as opened:
            history = opened.history(queue, job_id)
    if not history:
        raise JobNotArchived(f"the floor holds no outcome of job {job_id!r} of queue "
                             f"{queue!r} (not settled on a declared queue, or not folded yet)")
    last = history[-1]
    if last.payload is None:
        raise PayloadNotRecorded(
            f"job {job_id!r} of queue {queue!r} settled ({last.outcome.value}, entry "
            f"{last.stream_id}) without its payload recorded: declare the queue with "
            "payload=True (emq archive declare --payload) for jobs to be replayable")
    try:
        value = last.payload_value
    except (ValueError, RecursionError) as exc:  # not JSON, or nested past the stack
        raise PayloadUnreadable(
            f"job {job_id!r} of queue {queue!r}: the payload recorded with entry "
            f"{last.stream_id} is not JSON the queue can take ({str(exc)[:200]}); "
            "nothing was enqueued") from exc
    body = validate.payload_json(value, conn.payload_limit)
    options = option_args(0, 0, DEFAULT_MAX_ATTEMPTS, None, last.name)
    call = intake.add_call(keys, options, [("", body)], replay_of=f"{queue}/{job_id}")
    return intake.added(conn.executor.run(*call))[0]
