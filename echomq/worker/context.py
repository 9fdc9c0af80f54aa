"""What a handler sees (``JobContext``) and how its answer becomes a ``HandlerOutcome``.

Runs on the handler's own thread: the outcome (result JSON, or the traceback's
last lines) is computed there, so the Consumer's loop only ships it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from echomq.errors import CancelledError, Fail, InvalidArgument, JobTimeout, RateLimited, Retry
from echomq.jobs import cancel as cancel_tokens
from echomq.jobs.joblog import append_log
from echomq.jobs.lease import extend_lock
from echomq.jobs.progress import report_progress
from echomq.jobs.texts import (
    DEFAULT_RESULT_LIMIT,
    attempt_error,
    cancelled_result,
    decoded,
    error_text,
    result_text,
)
from echomq.models import CancelVerdict
from echomq.queue.transitions.leases import LEASE_LOST

if TYPE_CHECKING:
    from echomq.queue.connection import Connection

_UNDECODED = object()

_current: ContextVar[JobContext | None] = ContextVar("echomq_current_job", default=None)
_token_lock = threading.Lock()
"""Mints a job's cancel token once when two threads ask for it at the same moment."""


@dataclass(frozen=True)
class FailPlan:
    """The settler's orders for one failed attempt. ``dead``: no retry whatever tries
    remain. ``delay_ms``: the retry's delay, when decided here; else the server's
    exponential backoff over ``base_ms``/``cap_ms``, scaled by a random draw when
    ``jitter``. A :class:`~echomq.worker.retry.RetryPolicy` gives one; it lives here,
    beside the outcome that carries it, so a worker with no policy never loads them."""

    dead: bool = False
    delay_ms: int | None = None
    base_ms: int | None = None
    cap_ms: int | None = None
    jitter: bool = False


DEAD = FailPlan(dead=True)


def current_job() -> JobContext | None:
    """The job the running handler or task works on; None outside one. A contextvar, so
    it is right on every handler thread (and in an event loop's tasks)."""
    return _current.get()


class JobContext:
    """The ``job`` a handler receives."""

    __slots__ = (
        "id", "name", "attempts", "_token", "queue", "finished", "started", "done",
        "deadline", "_conn", "_lease_ms", "_raw", "_payload", "_row", "traceparent", "span",
        "ran_s", "timed_out", "timeout_s", "runner", "on_cancel",
    )

    def __init__(
        self, conn: Connection, queue: str, job_id: str, token: int, raw_payload: str,
        lease_ms: int, name: str = "", deadline: float = 0.0,
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
        self.deadline = deadline
        """When the lease ends at the latest, on this process's monotonic clock
        (the send time of the last claim or renewal plus the lease)."""
        self._token: cancel_tokens.CancelToken | None = None
        """Minted on first use: most handlers never look at it (:attr:`cancel_token`)."""
        self.queue = queue
        self._conn = conn
        self._lease_ms = lease_ms
        self.traceparent: str | None = None
        """The producer's W3C trace context (read only while echomq.tracing is on)."""
        self.span: Any = None
        """The handler's span while tracing is on (the settle's span is its child)."""
        self.ran_s = 0.0
        """How long the handler ran, in seconds (set when it returned)."""
        self.timed_out = False
        """Set when the run reached its timeout (its token then fired with ``timeout``)."""
        self.timeout_s: float | None = None
        """The run's timeout, once its handler started (None: no timeout)."""
        self.runner: Any = None
        """The handler thread running the job (set when it starts; None for a coroutine)."""
        self.on_cancel: Callable[[], object] | None = None
        """Called when the job's token fires (an async task's: cancel its coroutine)."""

    @property
    def cancel_token(self) -> cancel_tokens.CancelToken:
        """The job's cancel token: fired by a cancel request, a lost lease or the timeout."""
        token = self._token
        if token is None:
            with _token_lock:  # a cancel and the handler may ask at once: one token
                token = self._token
                if token is None:
                    token = self._token = cancel_tokens.new()
        return token

    @property
    def payload(self) -> Any:
        """The job's payload, decoded from JSON on first use (on the handler's thread)."""
        if self._payload is _UNDECODED:
            self._payload = decoded(self._raw)
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

    def signal_cancel(self, reason: str | None) -> None:
        """Fire this job's cancel token (the first reason wins); an async task's coroutine
        is cancelled too, so it stops at its next await."""
        cancel_tokens.cancel(self.cancel_token, reason)
        if self.on_cancel is not None:
            self.on_cancel()

    async def acheckpoint(self, lease_ms: int | None = None) -> None:
        """:meth:`checkpoint` from an async task, without blocking its event loop."""
        import asyncio

        await asyncio.to_thread(self.checkpoint, lease_ms)

    async def aprogress(self, value: Any) -> None:
        """:meth:`progress` from an async task, without blocking its event loop."""
        import asyncio

        await asyncio.to_thread(self.progress, value)

    async def alog(self, text: str) -> None:
        """:meth:`log` from an async task, without blocking its event loop."""
        import asyncio

        await asyncio.to_thread(self.log, text)

    def cancelled(self) -> bool:
        """True once a cancel reached this job (a shortcut for ``cancel.check``)."""
        token = self._token
        return token is not None and cancel_tokens.check(token) is not None

    def __repr__(self) -> str:
        return f"<JobContext {self.queue}/{self.id} attempt {self.attempts}>"


Kind = Literal["completed", "cancelled", "failed", "rejected", "lost", "pending", "limited"]
"""``rejected``: a failure that every retry would repeat (a result that cannot be
stored), dead-lettered at once. ``pending``: the handler returned a coroutine (an async
task), which runs on the event loop and ends in one of the others. ``limited``: the
handler raised ``RateLimited``; handed back uncounted, its plan's ``delay_ms`` the wait."""


class HandlerOutcome:
    """How one run ended: the kind, and the result or error text to store; for a failure
    the plan (retry when, or dead at once) and the attempt's error record (JSON)."""

    __slots__ = ("job", "kind", "text", "plan", "error", "coro")

    def __init__(self, job: JobContext, kind: Kind, text: str, plan: FailPlan | None = None,
                 error: str | None = None, coro: Coroutine[Any, Any, Any] | None = None
                 ) -> None:
        self.job = job
        self.kind = kind
        self.text = text
        self.plan = plan
        self.error = error
        self.coro = coro
        """An async task's coroutine (kind ``pending``), for the event loop to run."""


FailurePolicy = Callable[[JobContext, BaseException], FailPlan]
"""Decides what a failed run leads to (a task's retry rules); see :mod:`echomq.worker.retry`."""


def execute(
    handler: Callable[[JobContext], Any], job: JobContext,
    result_limit: int = DEFAULT_RESULT_LIMIT, policy: FailurePolicy | None = None,
) -> HandlerOutcome:
    """Run the handler once, as :func:`current_job`, and classify its answer; never raises.
    A coroutine (an async task) is not an answer: it comes back ``pending``, to be run on
    the event loop and concluded by :func:`raised` or :func:`returned`."""
    entered = _current.set(job)
    try:
        value = handler(job)
    except BaseException as exc:  # noqa: BLE001 - a handler's failure is the job's, not ours
        return raised(job, exc, policy)
    finally:
        _current.reset(entered)
    if value is None:  # the common answer, without the ABC check below
        return HandlerOutcome(job, "completed", "null")
    if isinstance(value, Coroutine):
        return HandlerOutcome(job, "pending", "", coro=value)
    return returned(job, value, result_limit, policy)


def raised(job: JobContext, exc: BaseException, policy: FailurePolicy | None = None
           ) -> HandlerOutcome:
    """A run that raised ``exc``: cancelled at its token (a failure when the token fired
    for the timeout), lost with its lease, or failed."""
    if isinstance(exc, CancelledError):
        if job.timed_out:  # the token fired for the timeout: a failed attempt
            return failure(job, JobTimeout(timeout_message(job, "stopped")), policy)
        return HandlerOutcome(job, "cancelled", cancelled_result(exc.reason))
    if isinstance(exc, LEASE_LOST):
        return HandlerOutcome(job, "lost", str(exc))
    if isinstance(exc, RateLimited):  # an outside limit: no try is used up
        return HandlerOutcome(job, "limited", str(exc), FailPlan(delay_ms=exc.delay_ms))
    return failure(job, exc, policy)


def returned(job: JobContext, value: Any, result_limit: int = DEFAULT_RESULT_LIMIT,
             policy: FailurePolicy | None = None) -> HandlerOutcome:
    """A run that returned ``value``."""
    if job.timed_out and isinstance(value, CancelVerdict):
        # it stopped at its token, which fired for the timeout: a failed attempt
        return failure(job, JobTimeout(timeout_message(job, "stopped")), policy)
    return classify(job, value, result_limit)


def timeout_message(job: JobContext, how: str) -> str:
    """``timeout after 30 s (killed)``: what a timed-out attempt's error says."""
    timeout = job.timeout_s
    shown = f"{timeout:g} s" if timeout is not None else "its timeout"
    return f"timeout after {shown} ({how})"


def failure(job: JobContext, exc: BaseException, policy: FailurePolicy | None = None
            ) -> HandlerOutcome:
    """A run that raised ``exc``: the policy's plan (a plain handler: ``Retry`` and
    ``Fail`` are obeyed, anything else retries on the Consumer's backoff). A policy that
    itself fails falls back to that backoff, so the job is never lost to it."""
    text = str(exc) if isinstance(exc, JobTimeout) else error_text(exc)
    try:
        plan = policy(job, exc) if policy is not None else default_plan(exc)
    except Exception as problem:  # noqa: BLE001 - reported with the job's own error
        plan = FailPlan()
        text = f"{text}\n(retry policy failed: {problem})"
    return HandlerOutcome(job, "rejected" if plan.dead else "failed", text, plan,
                          attempt_error(exc))


def default_plan(exc: BaseException) -> FailPlan:
    """A plain handler's failure: ``Fail`` is dead at once, ``Retry(delay_ms)`` is obeyed,
    anything else retries on the Consumer's backoff."""
    if isinstance(exc, Fail):
        return DEAD
    if isinstance(exc, Retry) and exc.delay_ms is not None:
        return FailPlan(delay_ms=exc.delay_ms)
    return FailPlan()


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
        return HandlerOutcome(job, "rejected", f"result not storable: {exc}", DEAD)
    except Exception as exc:  # noqa: BLE001 - e.g. a CancelVerdict whose reason is no str
        return HandlerOutcome(job, "rejected",
                              f"result not storable: {type(exc).__name__}: {exc}", DEAD)
