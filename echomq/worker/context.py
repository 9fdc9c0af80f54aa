"""What a handler sees (``JobContext``) and how its answer becomes a ``HandlerOutcome``.

Runs on the handler's own thread: the outcome (result JSON, or the traceback's
last lines) is computed there, so the Consumer's loop only ships it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from echomq.errors import CancelledError, InvalidArgument
from echomq.jobs import cancel as cancel_tokens
from echomq.jobs.joblog import append_log
from echomq.jobs.lease import extend_lock
from echomq.jobs.progress import report_progress
from echomq.jobs.texts import DEFAULT_RESULT_LIMIT, cancelled_result, error_text, result_text
from echomq.models import CancelVerdict
from echomq.queue.transitions import LEASE_LOST

if TYPE_CHECKING:
    from echomq.queue.connection import Connection

_UNDECODED = object()


class JobContext:
    """The ``job`` a handler receives."""

    __slots__ = (
        "id", "name", "attempts", "cancel_token", "queue", "finished", "started", "done",
        "deadline", "_conn", "_lease_ms", "_raw", "_payload", "_row", "traceparent", "span",
    )

    def __init__(
        self, conn: Connection, queue: str, job_id: str, token: int, raw_payload: str,
        lease_ms: int, name: str = "",
    ) -> None:
        self.id = job_id
        self.name: str | None = name or None
        """The job's name (``add(name=)``; a task's name): None when it was added without."""
        self._row: tuple[int, int | None] | None = None
        self._raw = raw_payload
        self._payload: Any = _UNDECODED
        self.attempts = token
        self.finished = False
        """Set once the Consumer has settled, lost or handed back this job."""
        self.started = False
        """Set when a handler thread takes the job from the buffer."""
        self.done = False
        """Set when the handler returned and its outcome went to the settler."""
        self.deadline = 0.0
        """When the lease ends at the latest, on this process's monotonic clock
        (the send time of the last claim or renewal plus the lease)."""
        self.cancel_token = cancel_tokens.new()
        self.queue = queue
        self._conn = conn
        self._lease_ms = lease_ms
        self.traceparent: str | None = None
        """The producer's W3C trace context (read only while echomq.tracing is on)."""
        self.span: Any = None
        """The handler's span while tracing is on (the settle's span is its child)."""

    @property
    def payload(self) -> Any:
        """The job's payload, decoded from JSON on first use (on the handler's thread)."""
        if self._payload is _UNDECODED:
            self._payload = json.loads(self._raw)
        return self._payload

    @property
    def max_attempts(self) -> int:
        """How many tries the job has in all (read from its row on first use)."""
        return self._read_row()[0]

    @property
    def created_at(self) -> int | None:
        """When the job was added, in ms since the epoch on the server's clock (read
        from its row on first use)."""
        return self._read_row()[1]

    def _read_row(self) -> tuple[int, int | None]:
        """The row's fields a claim does not carry: one round trip, on first use only."""
        if self._row is None:
            found = self._conn.redis.hmget(self._conn.keys(self.queue).job(self.id),
                                           ["max_attempts", "created_at"])
            self._row = (int(found[0] or 0), int(found[1]) if found[1] else None)
        return self._row

    @property
    def token(self) -> int:
        """The fencing token this holder claimed with (equal to ``attempts``)."""
        return self.attempts

    def checkpoint(self, lease_ms: int | None = None) -> None:
        """Extend this job's lease to server time + ``lease_ms`` (default: the Consumer's).

        Raises ``StaleToken``, ``NotActive`` or ``JobGone`` when the lease is lost,
        so the handler stops: another worker may already hold the job.
        """
        lease_ms = lease_ms or self._lease_ms
        sent = time.monotonic()
        extend_lock(self._conn, self.queue, self.id, self.attempts, lease_ms)
        self.deadline = sent + lease_ms / 1000

    def progress(self, value: Any) -> None:
        """Report how far the job got: ``value`` (JSON, at most 64 KiB) is stored on the
        row (``Job.progress``) and published as a ``progress`` event, in one call.

        Raises ``InvalidArgument`` for a value that is not JSON or too large, and
        ``StaleToken``, ``NotActive`` or ``JobGone`` when this holder lost the job (the
        run then ends as lost, like a failed ``checkpoint``).
        """
        report_progress(self._conn, self.queue, self.id, self.attempts, value)

    def log(self, text: str) -> None:
        """Append one line to the job's log, kept on its row (the last 100 lines, 64 KiB)
        with the time and this attempt, shown by ``emq show`` and the dashboard and
        recorded with the job's outcome. Fenced like ``progress``: ``InvalidArgument``
        for a line that is not a non-empty str of at most 64 KiB; ``StaleToken``,
        ``NotActive`` or ``JobGone`` when this holder lost the job."""
        append_log(self._conn, self.queue, self.id, self.attempts, text)

    def cancelled(self) -> bool:
        """True once a cancel reached this job (a shortcut for ``cancel.check``)."""
        return cancel_tokens.check(self.cancel_token) is not None

    def __repr__(self) -> str:
        return f"<JobContext {self.queue}/{self.id} attempt {self.attempts}>"


Kind = Literal["completed", "cancelled", "failed", "rejected", "lost"]
"""``rejected``: a failure that every retry would repeat (a result that cannot be
stored), dead-lettered at once."""


class HandlerOutcome:
    """How one run ended: the kind, and the result or error text to store."""

    __slots__ = ("job", "kind", "text")

    def __init__(self, job: JobContext, kind: Kind, text: str) -> None:
        self.job = job
        self.kind = kind
        self.text = text


def execute(
    handler: Callable[[JobContext], Any], job: JobContext,
    result_limit: int = DEFAULT_RESULT_LIMIT,
) -> HandlerOutcome:
    """Run the handler once and classify its answer; never raises."""
    try:
        value = handler(job)
    except CancelledError as exc:
        return HandlerOutcome(job, "cancelled", cancelled_result(exc.reason))
    except LEASE_LOST as exc:
        return HandlerOutcome(job, "lost", str(exc))
    except BaseException as exc:  # noqa: BLE001 - a handler's failure is the job's, not ours
        return HandlerOutcome(job, "failed", error_text(exc))
    return classify(job, value, result_limit)


def classify(job: JobContext, value: Any, result_limit: int) -> HandlerOutcome:
    """A handler's return value as the outcome to settle; never raises. A value that
    cannot be stored is ``rejected``: every retry would return it again."""
    try:
        if value is None:
            return HandlerOutcome(job, "completed", "null")
        if isinstance(value, CancelVerdict):
            return HandlerOutcome(job, "cancelled", cancelled_result(value.reason))
        return HandlerOutcome(job, "completed", result_text(value, result_limit))
    except InvalidArgument as exc:
        return HandlerOutcome(job, "rejected", f"result not storable: {exc}")
    except Exception as exc:  # noqa: BLE001 - e.g. a CancelVerdict whose reason is no str
        return HandlerOutcome(job, "rejected", f"result not storable: {type(exc).__name__}: {exc}")
