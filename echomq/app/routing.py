"""Routing by name: the one handler of an App's worker, and its failure policy.

Each claimed job runs the task registered under its ``name``. A name no task has is a
failure retried on the worker's default backoff, so in a rolling deploy where producers
are ahead of workers the job waits for a worker that knows it, and is never lost; past
its tries it is dead-lettered with the names this worker knew.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from echomq.app.calls import call_arguments, job_backoff, job_timeout
from echomq.errors import UnknownTask
from echomq.worker.context import FailPlan, JobContext
from echomq.worker.retry import RetryPolicy

if TYPE_CHECKING:
    from echomq.app.task import Task


_NONE: dict[str, Any] = {}
"""The kwargs of a call whose payload has none (never written to)."""


class Router:
    """Calls the task a job names; decides what its failures lead to."""

    def __init__(self, tasks: Mapping[str, Task[Any, Any]]) -> None:
        self.tasks = dict(tasks)
        self._known = ", ".join(sorted(self.tasks)) or "no tasks"

    def __call__(self, job: JobContext) -> Any:
        task = self.tasks.get(job.name or "")
        if task is None:
            shown = "(a job with no name)" if job.name is None else repr(job.name)
            raise UnknownTask(f"unknown task {shown} (this worker knows: {self._known})")
        payload = job.payload
        if type(payload) is dict:  # the usual shape, checked here: a call less a job
            args, kwargs = payload.get("args", ()), payload.get("kwargs", _NONE)
            if type(args) is list and type(kwargs) is dict:
                return task.fn(*args, **kwargs)
        args, kwargs = call_arguments(payload)  # any other shape: Fail, saying why
        return task.fn(*args, **kwargs)

    def plan(self, job: JobContext, exc: BaseException) -> FailPlan:
        """The task's retry rules (or the job's own backoff, from ``enqueue_with``); an
        unknown task retries on the worker's default backoff."""
        task = self.tasks.get(job.name or "")
        if task is None or isinstance(exc, UnknownTask):
            return FailPlan()
        policy = task.policy
        backoff = job_backoff(job.payload)
        if backoff is not None:
            policy = RetryPolicy(backoff, retry_on=policy.retry_on,
                                 dont_retry_on=policy.dont_retry_on)
        return policy.plan(job.attempts, exc)

    def timeouts(self, job: JobContext) -> tuple[float, float] | None:
        """The run's ``(timeout_s, grace_s)``: the job's own timeout, else its task's."""
        task = self.tasks.get(job.name or "")
        if task is None:
            return None
        payload = job.payload
        # most payloads carry no timeout of their own: a call less a job for them
        has_own = type(payload) is not dict or "timeout_s" in payload
        timeout = job_timeout(payload) if has_own else None
        if timeout is None:
            timeout = task.timeout_s
        return None if timeout is None else (timeout, task.timeout_grace_s)
