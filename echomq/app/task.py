"""A task: a function registered with an App under a name, enqueued by that name.

``send.enqueue(...)`` adds a job named after the task to the task's queue, with the call's
arguments as its payload (``calls.py``); a worker routes it back to the function by its
name. ``send(...)`` is a plain call that runs here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from echomq.app.calls import call_payload
from echomq.app.flows import Signature
from echomq.errors import InvalidArgument
from echomq.queue import validate
from echomq.queue.dedup import DedupMode
from echomq.queue.enqueue import add, add_many
from echomq.queue.keys import check_name
from echomq.worker.retry import BackoffSpec, RetryPolicy, check_backoff

if TYPE_CHECKING:
    from echomq.app.app import App

P = ParamSpec("P")
R = TypeVar("R")


class Task(Generic[P, R]):
    """A registered function; see :meth:`echomq.App.task`."""

    def __init__(self, app: App, fn: Callable[P, R], *, name: str, queue: str,
                 max_attempts: int, policy: RetryPolicy, priority: int,
                 timeout_s: float | None = None, timeout_grace_s: float = 5.0) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.queue = queue
        self.max_attempts = max_attempts
        self.policy = policy
        self.priority = priority
        self.timeout_s = timeout_s
        """Seconds a run may take before its token fires with ``timeout`` (None: no limit)."""
        self.timeout_grace_s = timeout_grace_s
        """Seconds after the timeout before a run still going is settled as failed."""
        self.is_async = inspect.iscoroutinefunction(fn)
        """An ``async def`` task: its runs are coroutines on the worker's event loop."""
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now, as a plain call (no job, no retries)."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} on {self.queue!r}>"

    def s(self, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """This call as a :class:`~echomq.app.flows.Signature`, for ``echomq.chain``,
        ``group`` and ``chord`` (nothing is sent; checked when the flow is enqueued)."""
        return Signature(self.name, self.queue, tuple(args), dict(kwargs))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """Add a job that calls this task with these arguments; its id (one round trip)."""
        return self.enqueue_with(args=args, kwargs=kwargs)

    def enqueue_with(self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
                     *, delay_ms: int = 0, job_id: str | None = None,
                     priority: int | None = None, group: str | None = None,
                     max_attempts: int | None = None, backoff: BackoffSpec | None = None,
                     timeout_s: float | None = None, queue: str | None = None,
                     dedup_id: str | None = None, dedup_ttl_ms: int | None = None,
                     dedup_mode: DedupMode = "until_done") -> str:
        """:meth:`enqueue` with per-job options: a delay, an id (idempotent: an existing
        id is returned unchanged), a priority, a group lane, the tries, backoff and
        timeout of this job alone (an ``echomq.Backoff`` or ``echomq.Fixed``; seconds),
        another queue, a dedup id (``echomq.add``'s deduplication: while a job holds it,
        the holder's id is returned and nothing is added)."""
        target, payload, options = self._job(args, kwargs, delay_ms=delay_ms, job_id=job_id,
                                             priority=priority, group=group,
                                             max_attempts=max_attempts, backoff=backoff,
                                             timeout_s=timeout_s, queue=queue)
        return add(self.app.conn, target, payload, dedup_id=dedup_id,
                   dedup_ttl_ms=dedup_ttl_ms, dedup_mode=dedup_mode, **options)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """:meth:`enqueue`, awaited (``echomq.aio``, on the App's :meth:`~echomq.App.aconn`)."""
        return await self.aenqueue_with(args=args, kwargs=kwargs)

    async def aenqueue_with(self, args: Sequence[Any] = (),
                            kwargs: Mapping[str, Any] | None = None, *, delay_ms: int = 0,
                            job_id: str | None = None, priority: int | None = None,
                            group: str | None = None, max_attempts: int | None = None,
                            backoff: BackoffSpec | None = None,
                            timeout_s: float | None = None, queue: str | None = None,
                            dedup_id: str | None = None, dedup_ttl_ms: int | None = None,
                            dedup_mode: DedupMode = "until_done") -> str:
        """:meth:`enqueue_with`, awaited: the same options, checked before the wire."""
        from echomq.aio.verbs import add as aadd

        target, payload, options = self._job(args, kwargs, delay_ms=delay_ms, job_id=job_id,
                                             priority=priority, group=group,
                                             max_attempts=max_attempts, backoff=backoff,
                                             timeout_s=timeout_s, queue=queue)
        return await aadd(await self.app.aconn(), target, payload, dedup_id=dedup_id,
                          dedup_ttl_ms=dedup_ttl_ms, dedup_mode=dedup_mode, **options)

    def _job(self, args: Sequence[Any], kwargs: Mapping[str, Any] | None, *, delay_ms: int,
             job_id: str | None, priority: int | None, group: str | None,
             max_attempts: int | None, backoff: BackoffSpec | None, timeout_s: float | None,
             queue: str | None) -> tuple[str, Any, dict[str, Any]]:
        """One job of this task: its queue, its payload and add's options."""
        payload = call_payload(self.name, args, kwargs or {},
                               None if backoff is None else check_backoff(backoff), timeout_s)
        target = self.queue if queue is None else check_name(queue, "queue name")
        return target, payload, {
            "job_id": job_id, "delay_ms": delay_ms, "priority": self._priority(priority),
            "group": group, "max_attempts": self._attempts(max_attempts), "name": self.name}

    def enqueue_many(self, calls: Iterable[Sequence[Any] | Mapping[str, Any]], *,
                     delay_ms: int = 0, priority: int | None = None,
                     group: str | None = None) -> list[str]:
        """Add one job per call: a tuple or list is the positional arguments, a dict the
        keyword ones. One round trip per 1,000 jobs; every call is checked first, so a bad
        one adds nothing."""
        payloads = [call_payload(self.name, (), call) if isinstance(call, Mapping)
                    else call_payload(self.name, call, {}) for call in calls]
        return add_many(self.app.conn, self.queue, payloads, delay_ms=delay_ms,
                        priority=self._priority(priority), group=group,
                        max_attempts=self.max_attempts, name=self.name)

    def _priority(self, priority: int | None) -> int:
        return self.priority if priority is None else priority

    def _attempts(self, max_attempts: int | None) -> int:
        if max_attempts is None:
            return self.max_attempts
        return validate.positive_int(max_attempts, "max_attempts")


def task_name(fn: Callable[..., Any], name: str | None) -> str:
    """The name a task is registered under: ``name``, or ``module.qualname`` of ``fn``."""
    if name is None:
        module = getattr(fn, "__module__", None) or "unknown"
        qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
        if not qualname:
            raise InvalidArgument(f"give the task a name: {fn!r} has no __qualname__")
        name = f"{module}.{qualname}"
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument(f"a task name must be a non-empty str, got {name!r}")
    return name
