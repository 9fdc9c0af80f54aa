"""The App: the tasks of a program and the connection they share.

``app = echomq.App()`` names the server once (a URL, a connection, or none: the folder's
shared server, as ``echomq.connect()``); ``@app.task`` registers functions under their
names; ``app.worker(queues=[...])`` runs them. The connection opens on first use, so
importing a module that defines an App touches no server.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, overload

from echomq.app.connect import connect
from echomq.app.task import Task, task_name
from echomq.errors import InvalidArgument
from echomq.queue import connection as connection_module
from echomq.queue import validate
from echomq.queue.connection import Connection, ExecutorName
from echomq.queue.enqueue import DEFAULT_MAX_ATTEMPTS
from echomq.queue.keys import PREFIX, check_name
from echomq.worker.options import check_timeout
from echomq.worker.retry import BackoffSpec, RetryPolicy

if TYPE_CHECKING:
    import asyncio

    from echomq.aio.connection import AsyncConnection
    from echomq.app.supervisor import Supervisor
    from echomq.app.worker import Worker

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_QUEUE = "default"
MAX_LEASE_MS = 24 * 3_600_000
"""Where a task is defined no lease is known yet: its grace is checked against the
worker's lease when a worker is made (:meth:`App.worker`)."""


class App:
    """Tasks by name, one connection, and the workers that run them."""

    def __init__(self, url: str | None = None, *, conn: Connection | None = None,
                 prefix: str = PREFIX, executor: ExecutorName = "scripts",
                 data_dir: str | os.PathLike[str] | None = None) -> None:
        if conn is not None and url is not None:
            raise InvalidArgument("give App a url or a conn, not both")
        if conn is None:
            connection_module.check_choices(executor, prefix)  # refused before any server
        self.url = url
        self.prefix = prefix
        self.executor: ExecutorName = executor
        self.data_dir = None if data_dir is None else Path(data_dir)
        self._conn = conn
        self._conn_lock = threading.Lock()
        self._aconn: tuple[asyncio.AbstractEventLoop, AsyncConnection] | None = None
        self._tasks: dict[str, Task[Any, Any]] = {}
        self.defined_in: str | None = sys._getframe(1).f_globals.get("__name__")
        """The module that made this App: a worker's child processes import it from there."""
        self.import_path: str | None = None
        """``module:attr`` where child processes find this App (``emq worker`` sets it;
        else found in :attr:`defined_in`)."""

    @property
    def conn(self) -> Connection:
        """The App's connection, opened on first use."""
        if self._conn is None:
            with self._conn_lock:
                if self._conn is None:
                    self._conn = connect(self.url, self.executor, prefix=self.prefix,
                                         data_dir=self.data_dir)
        return self._conn

    async def aconn(self) -> AsyncConnection:
        """The App's asyncio connection (``echomq.aio``), opened on the first await: to the
        App's URL, its connection's server, or the folder's shared server, with its prefix
        and executor. ``task.aenqueue`` uses it. An asyncio connection belongs to one event
        loop: awaited on another loop (a new ``asyncio.run``), a new one is opened there."""
        import asyncio

        from echomq.aio.connection import connect as aconnect

        loop = asyncio.get_running_loop()
        found = self._aconn
        if found is not None and found[0] is loop:
            return found[1]
        conn = self._conn
        if conn is not None:
            opened = await aconnect(conn.url, prefix=conn.prefix, executor=conn.executor_name,
                                    payload_limit=conn.payload_limit, cluster=conn.cluster)
        else:
            opened = await aconnect(self.url, prefix=self.prefix, executor=self.executor,
                                    data_dir=self.data_dir)
        found = self._aconn
        if found is not None and found[0] is loop:  # another task opened one meanwhile
            await opened.close()
            return found[1]
        self._aconn = (loop, opened)
        return opened

    async def aclose(self) -> None:
        """Close the asyncio connection :meth:`aconn` opened on this loop (a later await
        opens it again)."""
        import asyncio

        found, loop = self._aconn, asyncio.get_running_loop()
        if found is not None and found[0] is loop:
            self._aconn = None
            await found[1].close()

    @property
    def names_a_server(self) -> bool:
        """True when the App was given a URL or a connection (not the default server)."""
        return self.url is not None or self._conn is not None

    def adopt(self, conn: Connection) -> None:
        """Use ``conn`` from now on (``emq worker`` hands the App the server its command
        line names); the connection the App opened itself, if any, is closed."""
        with self._conn_lock:
            old, self._conn = self._conn, conn
            self.prefix = conn.prefix
        if old is not None and old is not conn:
            old.close()

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        """The registered tasks by name."""
        return dict(self._tasks)

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(self, fn: None = None, /, *, name: str | None = None, queue: str = DEFAULT_QUEUE,
             max_attempts: int = DEFAULT_MAX_ATTEMPTS, backoff: BackoffSpec | None = None,
             retry_on: tuple[type[BaseException], ...] = (Exception,),
             dont_retry_on: tuple[type[BaseException], ...] = (),
             priority: int = 0, timeout_s: float | None = None,
             timeout_grace_s: float = 5.0) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(self, fn: Callable[P, R] | None = None, /, *, name: str | None = None,
             queue: str = DEFAULT_QUEUE, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
             backoff: BackoffSpec | None = None,
             retry_on: tuple[type[BaseException], ...] = (Exception,),
             dont_retry_on: tuple[type[BaseException], ...] = (),
             priority: int = 0, timeout_s: float | None = None,
             timeout_grace_s: float = 5.0
             ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function as a task (``@app.task`` or ``@app.task(queue="mail")``).

        ``name`` defaults to ``module.qualname``; a producer in any language reaches the
        task by adding a job with that name. ``max_attempts``, ``backoff`` (an
        ``echomq.Backoff``, the default with full jitter; ``echomq.Fixed``; or a callable
        ``(attempt, exc) -> delay_ms``), ``retry_on`` and ``dont_retry_on`` are its retry
        rules; ``priority`` its jobs' default priority (0 runs first). ``timeout_s``: at
        that many seconds of a run its cancel token fires with ``timeout``;
        ``timeout_grace_s`` later a run still going is settled as failed without it."""
        policy = RetryPolicy(backoff, retry_on=retry_on, dont_retry_on=dont_retry_on)
        if timeout_s is not None:
            check_timeout(timeout_s, timeout_grace_s, lease_ms=MAX_LEASE_MS)
        check_name(queue, "queue")
        attempts = validate.positive_int(max_attempts, "max_attempts")
        validate.non_negative_int(priority, "priority")

        def register(func: Callable[P, R]) -> Task[P, R]:
            if not callable(func):
                raise InvalidArgument(f"a task must be callable, got {func!r}")
            registered = task_name(func, name)
            if registered in self._tasks:
                raise InvalidArgument(f"task {registered!r} is registered twice (give one "
                                      "of them another name=)")
            task = Task(self, func, name=registered, queue=queue, max_attempts=attempts,
                        policy=policy, priority=priority, timeout_s=timeout_s,
                        timeout_grace_s=timeout_grace_s)
            self._tasks[registered] = task
            return task

        return register if fn is None else register(fn)

    def queues(self) -> list[str]:
        """The queues of the registered tasks, in the order they were first named."""
        return list(dict.fromkeys(task.queue for task in self._tasks.values()))

    @overload
    def worker(self, queues: str | Sequence[str] | None = None, *, concurrency: int = 8,
               processes: Literal[1] = 1, max_jobs_per_process: None = None,
               max_memory_mb: None = None, **consumer_options: Any) -> Worker: ...

    @overload
    def worker(self, queues: str | Sequence[str] | None = None, *, concurrency: int = 8,
               processes: int = 1, max_jobs_per_process: int | None = None,
               max_memory_mb: int | None = None,
               **consumer_options: Any) -> Worker | Supervisor: ...

    def worker(self, queues: str | Sequence[str] | None = None, *, concurrency: int = 8,
               processes: int = 1, max_jobs_per_process: int | None = None,
               max_memory_mb: int | None = None,
               **consumer_options: Any) -> Worker | Supervisor:
        """A worker over ``queues`` (default: every task's queue, in registration order):
        ``["high", "mail"]`` is strict priority, ``"high:5,low:1"`` weighted shares. The
        rest are the Consumer's options (lease_ms, record, recovery, ...).

        ``processes=N`` (N > 1) returns a :class:`~echomq.app.supervisor.Supervisor` of N
        spawned child processes, each this worker with ``concurrency`` threads; so does
        ``max_jobs_per_process`` or ``max_memory_mb`` (a child restarts after that many
        settled jobs, or past that RSS). The children import the App, so it must live in
        an importable module (not a script's ``__main__``)."""
        from echomq.app.worker import Worker

        validate.positive_int(processes, "processes")
        if queues is None:
            queues = self.queues()
            if not queues:
                raise InvalidArgument("this App has no tasks: register one with @app.task "
                                      "or name the queues")
        if processes == 1 and max_jobs_per_process is None and max_memory_mb is None:
            return Worker(self, queues, concurrency=concurrency, **consumer_options)
        from echomq.app.supervisor import Supervisor

        return Supervisor(self, queues, processes=processes, concurrency=concurrency,
                          max_jobs_per_process=max_jobs_per_process,
                          max_memory_mb=max_memory_mb, **consumer_options)

    def close(self) -> None:
        """Close the connection (a later use opens it again)."""
        with self._conn_lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __repr__(self) -> str:
        return f"<App {len(self._tasks)} task(s)>"
