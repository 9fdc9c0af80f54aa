"""The jobs a dead worker child held: the supervisor settles each one at once under its
fencing token, as a failed attempt retried by its task's policy (or dead-lettered on its
last try), instead of waiting for its lease to lapse; when the supervisor itself killed
the child at the end of a stop, they are handed back instead."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

from echomq.errors import EchoMQError, ProcessDied
from echomq.jobs.texts import attempt_error
from echomq.queue.connection import Connection
from echomq.queue.transitions import settles
from echomq.worker.context import FailPlan
from echomq.worker.retry import RetryPolicy

if TYPE_CHECKING:
    from echomq.app.app import App

log = logging.getLogger("echomq.worker")

Holdings = dict[tuple[str, str], tuple[int, str | None]]
"""What a child holds: ``(queue, job id)`` to ``(token, task name)``."""


def exit_status(code: int | None) -> str:
    """A child's end for log lines and errors: ``signal 9`` or ``exit status 1``."""
    if code is not None and code < 0:
        return f"signal {-code}"
    return f"exit status {code}"


@dataclass(frozen=True)
class Orphans:
    """How a supervisor settles what a dead child held: the connection, the App (each
    task's backoff) and the worker's own backoff and recording."""

    conn: Connection
    app: App
    backoff_ms: int
    backoff_cap_ms: int
    record: bool

    def settle(self, held: Holdings, pid: int, code: int, *, killed_by_us: bool) -> None:
        """Fail each job the child held under its token (hand it back when the
        supervisor itself killed the child at the end of a stop). A job that settled
        meanwhile answers StaleToken or NotActive: fine."""
        why = f"worker process {pid} died ({exit_status(code)})"
        if killed_by_us:
            self._hand_back(held)
            return
        for (queue, job_id), (token, name) in held.items():
            plan = self._plan(name, token, why)
            call = settles.fail_call(
                self.conn.keys(queue), job_id, token, why,
                backoff_ms=plan.base_ms or self.backoff_ms,
                backoff_cap_ms=plan.cap_ms or self.backoff_cap_ms, record=self.record,
                delay_ms=plan.delay_ms, error_entry=attempt_error(ProcessDied(why)))
            try:
                verdict = settles.failed(self.conn.executor.run(*call), job_id)
            except (EchoMQError, redis.RedisError) as exc:
                log.warning("could not settle job %s/%s of dead child %d; its lease will "
                            "lapse: %s", queue, job_id, pid, exc)
                continue
            if isinstance(verdict, BaseException):
                continue  # settled meanwhile (StaleToken, NotActive) or gone
            log.info("job %s/%s attempt %d failed: %s (%s)", queue, job_id, token, why,
                     verdict)
        held.clear()

    def _hand_back(self, held: Holdings) -> None:
        from echomq.jobs.settle import release_many

        by_queue: dict[str, list[tuple[str, int]]] = {}
        for (queue, job_id), (token, _name) in held.items():
            by_queue.setdefault(queue, []).append((job_id, token))
        for queue, jobs in by_queue.items():
            try:
                release_many(self.conn, queue, jobs)
            except (EchoMQError, redis.RedisError) as exc:
                log.warning("could not hand back %d job(s) of %r: %s", len(jobs), queue,
                            exc)

    def _plan(self, name: str | None, attempt: int, why: str) -> FailPlan:
        """The task's backoff for a job whose process died (always a retry while tries
        remain: a death is not the task's exception)."""
        task = self.app.tasks.get(name or "")
        if task is None:
            return FailPlan()
        try:
            return RetryPolicy(task.policy.backoff).plan(attempt, ProcessDied(why))
        except EchoMQError:
            return FailPlan()
