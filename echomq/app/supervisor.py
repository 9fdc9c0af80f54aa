"""The supervisor of ``app.worker(processes=N)``: N spawned children, each an App worker.

Each child (:mod:`echomq.app.child`) imports the App by its path and tells the supervisor
over a pipe which jobs it holds. A child that dies (kill -9, OOM, a segfault in a C
extension) has each job it held settled at once as a failed attempt under that job's
fencing token, so it is retried by its policy (or dead-lettered on its last try) without
waiting for its lease, and a replacement starts at once. A child that recycles itself
(``max_jobs_per_process``, ``max_memory_mb``) exits 0 after a graceful stop and is replaced.
SIGTERM or SIGINT is forwarded to every child as a graceful stop; a second one forces.
Children are spawned, never forked: the parent has threads. What a dead child held is
settled by its ``Orphans`` (``orphans.py``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from echomq.app import child as child_module
from echomq.app.orphans import Orphans, exit_status
from echomq.errors import ConsumerCrashed, InvalidArgument
from echomq.jobs.settle import DEFAULT_BACKOFF_CAP_MS, DEFAULT_BACKOFF_MS
from echomq.queue import worker_events
from echomq.queue.worker_events import WorkerEvent
from echomq.worker.heartbeat import Heartbeat, leave

if TYPE_CHECKING:
    from echomq.app.app import App
    from echomq.app.worker import Worker

log = logging.getLogger("echomq.worker")

TICK_S = 0.2
"""The longest the supervisor sleeps between looks at its children."""
STOP_MARGIN_S = 10.0
"""Beyond the grace period, how long a stopping child may take to hand back and settle."""
FORCED_MARGIN_S = 8.0
"""After a forced stop, how long a child may take before it is killed."""
MAX_START_FAILURES = 3
"""Children that fail to start in a row before the supervisor gives up."""


@dataclass
class ChildState:
    """What the supervisor knows of one child."""

    process: BaseProcess
    pipe: Pipe
    ready: bool = False
    recycling: str | None = None
    told: int = 0
    killed: bool = False
    """Killed by the supervisor at the end of a stop: its jobs are handed back."""
    """SIGTERMs sent to it (one per stop asked)."""
    failure: str | None = None
    held: dict[tuple[str, str], tuple[int, str | None]] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid or 0


def import_path(app: App) -> str:
    """Where a spawned child finds ``app``: ``module:attr``. An App made in a script's
    ``__main__`` (or not a module attribute) cannot be re-imported there: refused."""
    given = getattr(app, "import_path", None)
    if given:
        return str(given)
    module_name = getattr(app, "defined_in", None)
    hint = ("define the App in an importable module (e.g. myapp/tasks.py) and run "
            "`emq worker myapp.tasks:app --processes N`")
    if module_name in (None, "__main__", "__mp_main__"):
        raise InvalidArgument("a worker with processes > 1 needs an App its children can "
                              "import, and this one was defined in __main__ (a script): "
                              + hint)
    module = sys.modules.get(str(module_name))
    for attr, value in vars(module or object()).items():
        if value is app:
            return f"{module_name}:{attr}"
    raise InvalidArgument(f"the App defined in {module_name!r} is not an attribute of that "
                          f"module, so a child process cannot import it: {hint}")


def _beat(record: Heartbeat | None, children: list[ChildState]) -> None:
    """The supervisor's record, once a beat, from its loop: what its children hold now (a
    server that does not answer costs a log line; the next beat writes it again)."""
    if record is None or not record.due():
        return
    held = [(q, i, token) for c in children for (q, i), (token, _) in c.held.items()]
    try:
        record.beat(held)
    except Exception as exc:  # noqa: BLE001 - the server may be restarting
        log.warning("supervisor heartbeat failed: %s", exc)


def _optional_positive(value: int | None, what: str) -> int | None:
    from echomq.queue import validate

    return None if value is None else validate.positive_int(value, what)


class Supervisor:
    """Runs ``processes`` children of an App's worker until SIGTERM/SIGINT or :meth:`stop`.

    ``restarts`` (children started to replace one that died or recycled), ``recycles``
    and ``child_deaths`` count what happened; each is logged as it happens."""

    def __init__(self, app: App, queues: str | Sequence[str], *, processes: int,
                 concurrency: int = 8, max_jobs_per_process: int | None = None,
                 max_memory_mb: int | None = None, **consumer_options: Any) -> None:
        from echomq.app.worker import Worker
        from echomq.queue import validate

        self.processes = validate.positive_int(processes, "processes")
        self.max_jobs = _optional_positive(max_jobs_per_process, "max_jobs_per_process")
        self.max_memory_mb = _optional_positive(max_memory_mb, "max_memory_mb")
        self.app = app
        self.target = import_path(app)
        # built here, never run: every option is checked before a child starts
        self.worker: Worker = Worker(app, queues, concurrency=concurrency, **consumer_options)
        try:
            pickle.dumps(consumer_options)
        except Exception as exc:  # noqa: BLE001 - a lambda, a lock: named in one line
            raise InvalidArgument(f"with processes > 1 the worker's options go to child "
                                  f"processes and must pickle: {exc}") from exc
        conn = self.worker.consumer.conn
        root = logging.getLogger()
        self.spec = child_module.ChildSpec(
            target=self.target, url=conn.url, executor=conn.executor_name,
            prefix=conn.prefix, payload_limit=conn.payload_limit, cluster=conn.cluster,
            queues=queues, concurrency=concurrency, parent_pid=os.getpid(),
            options=dict(consumer_options), max_jobs=self.max_jobs,
            max_memory_mb=self.max_memory_mb,
            log_level=root.getEffectiveLevel() if root.handlers else None)
        self.grace_s = self.worker.consumer.grace_s
        self.orphans = Orphans(
            conn, app, int(consumer_options.get("backoff_ms", DEFAULT_BACKOFF_MS)),
            int(consumer_options.get("backoff_cap_ms", DEFAULT_BACKOFF_CAP_MS)),
            self.worker.consumer.record)
        """Settles what a dead child held (``orphans.py``)."""
        self.children: list[ChildState] = []
        self.restarts = 0
        self.recycles = 0
        self.child_deaths = 0
        self._start_failures = 0
        self._stops = 0
        self._deadline: float | None = None
        self._context = multiprocessing.get_context("spawn")
        self.heartbeat = self.worker.consumer.heartbeat
        if self.heartbeat is not None:  # its own record (beside its children's): _beat
            self.heartbeat.describe(kind="supervisor", concurrency=processes * concurrency)

    # -- public -------------------------------------------------------------------------

    def start_line(self) -> str:
        pids = ", ".join(str(c.pid) for c in self.children)
        return (f"supervisor pid {os.getpid()}: {self.processes} process(es) of "
                f"{self.worker.start_line()} (app {self.target}); children: pids {pids}")

    def run(self, *, install_signals: bool = True) -> None:
        """Start the children and keep them running until stopped; raises
        ``ConsumerCrashed`` when children keep failing to start."""
        restore = self._install_signals() if install_signals else None
        try:
            for _ in range(self.processes):
                if self._stops:
                    break
                self.children.append(self._spawn())
            log.info("%s", self.start_line())
            self._tell_all()  # a signal that came while they were spawned
            self._loop()
        finally:
            self._kill_all()
            leave(self.heartbeat)
            if restore is not None:
                restore()
        log.info("supervisor stopped: %d restart(s), %d recycle(s), %d child death(s)",
                 self.restarts, self.recycles, self.child_deaths)

    def stop(self) -> None:
        """Stop every child gracefully (the grace period, then their jobs are handed
        back); a second call forces."""
        self._stops += 1
        forced = self._stops > 1
        margin = FORCED_MARGIN_S if forced else self.grace_s + STOP_MARGIN_S
        deadline = time.monotonic() + margin
        self._deadline = deadline if self._deadline is None else min(self._deadline, deadline)
        self._tell_all()

    def _tell_all(self) -> None:
        """Each child gets one SIGTERM per stop asked (a second one forces), once."""
        for c in self.children:
            while c.told < min(self._stops, 2):
                c.told += 1
                self._signal(c, signal.SIGTERM)

    @property
    def pids(self) -> list[int]:
        """The children's pids."""
        return [c.pid for c in self.children]

    # -- the loop -----------------------------------------------------------------------

    def _loop(self) -> None:
        while self.children:
            _beat(self.heartbeat, self.children)
            ready = wait([c.pipe for c in self.children]
                         + [c.process.sentinel for c in self.children], TICK_S)
            for c in list(self.children):
                if c.pipe in ready:
                    self._drain(c)
                if c.process.sentinel in ready or not c.process.is_alive():
                    self._exited(c)
            if self._deadline is not None and time.monotonic() > self._deadline:
                for c in self.children:
                    log.warning("child %d still running past the stop deadline: killed", c.pid)
                    c.killed = True
                    self._signal(c, signal.SIGKILL)
                self._deadline = time.monotonic() + 5.0

    def _spawn(self) -> ChildState:
        reader, writer = self._context.Pipe(duplex=False)
        process = self._context.Process(target=child_module.main, args=(self.spec, writer),
                                        name="emq-worker-child", daemon=False)
        process.start()
        writer.close()
        return ChildState(process, reader)

    def _drain(self, c: ChildState) -> None:
        """Take every message the child sent so far."""
        try:
            while c.pipe.poll():
                self._message(c, c.pipe.recv())
        except (EOFError, OSError):
            pass

    def _message(self, c: ChildState, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "held":
            for queue, job_id, token, name in message[1]:
                c.held[queue, job_id] = (token, name)
        elif kind == "released":
            for queue, job_id, token in message[1]:
                if c.held.get((queue, job_id), (None,))[0] == token:
                    del c.held[queue, job_id]
        elif kind == "ready":
            c.ready = True
            self._start_failures = 0
        elif kind == "recycle":
            c.recycling = str(message[1])
        elif kind == "failed":
            c.failure = str(message[1])

    def _exited(self, c: ChildState) -> None:
        c.process.join(1.0)
        if c.process.exitcode is None:
            return
        self._drain(c)
        c.pipe.close()
        self.children.remove(c)
        code = c.process.exitcode
        stopping = self._stops > 0
        # a child killed from outside while it started (kill -9, the OOM killer) died; it is
        # not a module that cannot start, three of which in a row end the supervisor
        started = c.ready or (code == -signal.SIGKILL and c.failure is None)
        if code != 0 and started:
            self.child_deaths += 1
            self._count("died")
            log.warning("child %d died (%s) holding %d job(s)", c.pid, exit_status(code),
                        len(c.held))
        if code != 0 and c.held:
            self.orphans.settle(c.held, c.pid, code, killed_by_us=c.killed)
        if not started:
            if stopping:
                return
            self._start_failures += 1
            why = c.failure or f"exit status {code}"
            log.error("child %d failed to start: %s", c.pid, why)
            if self._start_failures >= MAX_START_FAILURES:
                raise ConsumerCrashed(f"worker children for {self.target} failed to start "
                                      f"{self._start_failures} times in a row: {why}")
        elif code == 0:
            if stopping:
                return
            self.recycles += 1
            self._count("recycled")
            log.info("child %d recycled (%s)", c.pid,
                     c.recycling or "it stopped on its own")
        elif stopping:
            return
        replacement = self._spawn()
        self.children.append(replacement)
        self.restarts += 1
        self._count("restarted")
        log.info("started child %d in place of %d (%d restart(s), %d recycle(s), "
                 "%d death(s) so far)", replacement.pid, c.pid, self.restarts, self.recycles,
                 self.child_deaths)

    def _count(self, event: WorkerEvent) -> None:
        """One worker event in each served queue's ``metrics:workers`` hash (Prometheus'
        ``echomq_worker_events_total``); a server that does not answer costs a log line."""
        worker_events.count(self.worker.consumer.conn, self.worker.queues, event)

    # -- signals ------------------------------------------------------------------------

    def _signal(self, c: ChildState, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(c.pid, signum)

    def _install_signals(self) -> Any:
        from echomq.worker.lifecycle import relay_signals

        def on_signal(signum: int) -> None:
            log.info("signal %s: %s", signal.Signals(signum).name,
                     "forcing the children to stop" if self._stops else
                     "stopping the children gracefully")
            self.stop()

        return relay_signals(on_signal)

    def _kill_all(self) -> None:
        """Leave no child behind (after an error in the loop): a forced stop, a few
        seconds to hand back, then SIGKILL and the supervisor hands back what they held."""
        if not self.children:
            return
        while self._stops < 2:
            self.stop()
        deadline = time.monotonic() + FORCED_MARGIN_S
        for c in self.children:
            c.process.join(max(0.0, deadline - time.monotonic()))
            if c.process.is_alive():
                self._signal(c, signal.SIGKILL)
                c.process.join(5.0)
            self._drain(c)
            if c.held and c.process.exitcode != 0:
                self.orphans.settle(c.held, c.pid, c.process.exitcode or -9, killed_by_us=True)
        self.children.clear()

