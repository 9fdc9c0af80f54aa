"""A held job's log lines (``job.log``): appended to its row in one fenced call.

Kept on the row as a JSON array of ``{"at", "attempt", "text"}``, bounded by the script
(the last 100 lines, 64 KiB), shown by ``get_job``, ``emq show`` and the dashboard, and
carried into the outcome stream with the job's outcome, so the archive keeps them after
Redis forgets the row. Fenced like ``progress``: a holder that lost its lease cannot
write into the log of the job's next run.
"""

from __future__ import annotations

from echomq.errors import InvalidArgument
from echomq.queue.connection import Connection
from echomq.queue.transitions import leases

LOG_LINE_LIMIT = 64 * 1024
"""Bytes of UTF-8 text one ``job.log`` line may hold (the whole log's bound too)."""


def log_text(text: object) -> str:
    """``text`` as one log line, or ``InvalidArgument`` before the wire: a line is a
    non-empty ``str`` of at most ``LOG_LINE_LIMIT`` bytes of UTF-8."""
    if not isinstance(text, str):
        raise InvalidArgument(f"a log line must be a str, got {type(text).__name__}")
    if not text:
        raise InvalidArgument("a log line must not be empty")
    try:
        size = len(text) if text.isascii() else len(text.encode())
    except UnicodeEncodeError as exc:
        raise InvalidArgument("a log line must be valid text (it holds a lone "
                              "surrogate)") from exc
    if size > LOG_LINE_LIMIT:
        raise InvalidArgument(f"a log line is {size} bytes, over the limit of "
                              f"{LOG_LINE_LIMIT}")
    return text


def append_log(conn: Connection, queue: str, job_id: str, token: int, text: str) -> None:
    """Append ``text`` to the held job's ``logs`` with the server's time and the attempt.

    Refuses, before the wire, a line that is not a non-empty ``str`` of at most 64 KiB
    (``InvalidArgument``); raises ``JobGone``, ``StaleToken`` or ``NotActive`` when
    ``token`` no longer holds the job (checked in that order, as ``progress``).
    """
    if isinstance(token, bool) or not isinstance(token, int):
        raise InvalidArgument(f"token must be an int, got {token!r}")
    line = log_text(text)
    call = leases.log_call(conn.keys(queue), job_id, token, line)
    leases.logged(conn.executor.run(*call), job_id)
