"""A held job's progress: stored on its row and published, in one fenced call.

Cheap on purpose (one HSET and one PUBLISH, nothing read back), so a handler may
report often; fenced like every verb of a holder, so a holder that lost its lease
cannot overwrite the progress of the job's next run.
"""

from __future__ import annotations

from typing import Any

from echomq.errors import InvalidArgument
from echomq.jobs.texts import PROGRESS_LIMIT, result_text
from echomq.queue.connection import Connection
from echomq.queue.events import progress_message
from echomq.queue.transitions import leases


def report_progress(
    conn: Connection, queue: str, job_id: str, token: int, value: Any,
    *, limit: int = PROGRESS_LIMIT,
) -> None:
    """Store ``value`` (any JSON value of at most ``limit`` bytes) as the job's
    ``progress`` and publish a ``progress`` event.

    Refuses, before the wire, a value that is not JSON or is too large
    (``InvalidArgument``); raises ``JobGone``, ``StaleToken`` or ``NotActive`` when
    ``token`` no longer holds the job (checked in that order, as ``extend_lock``).
    """
    if isinstance(token, bool) or not isinstance(token, int):
        raise InvalidArgument(f"token must be an int, got {token!r}")
    text = result_text(value, limit, what="progress")
    keys = conn.keys(queue)
    call = leases.progress_call(keys, job_id, token, text, progress_message(job_id, text))
    leases.progressed(conn.executor.run(*call), job_id)
