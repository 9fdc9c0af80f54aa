"""One child process of a supervised worker: it imports the App by its path and runs the
App's in-process :class:`~echomq.app.worker.Worker`.

The child tells its supervisor over a pipe which jobs it holds (``held``/``released``),
so the supervisor can settle them at once if the child dies. It reacts only to its
supervisor's SIGTERM (a terminal's Ctrl-C reaches the supervisor, which forwards it), it
stops when the supervisor is gone (no child outlives it), and it recycles itself after
``max_jobs`` settles or past ``max_memory_mb`` of RSS: a graceful stop, then exit 0.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from typing import Any

from echomq.queue import connection

log = logging.getLogger("echomq.worker")

START_FAILED = 3
"""The exit status of a child that could not import the App or build its worker."""
PARENT_CHECK_S = 0.2
"""How often a child looks for its supervisor (and at its own RSS)."""
RELEASE_BATCH = 256
"""Released jobs gathered before a pipe write (else every :data:`PARENT_CHECK_S`)."""
ORPHAN_EXIT_S = 3.0
"""How long a child whose supervisor died may take to hand back its jobs before it exits
anyway."""
LOG_FORMAT = "%(asctime)s %(levelname)s [pid %(process)d] %(name)s: %(message)s"


@dataclass(frozen=True)
class ChildSpec:
    """All a spawned child needs (pickled to it): where the App is, the server its
    supervisor uses, and the worker's options."""

    target: str
    url: str
    executor: connection.ExecutorName
    prefix: str
    payload_limit: int
    cluster: bool
    queues: Any
    concurrency: int
    parent_pid: int
    options: dict[str, Any] = field(default_factory=dict)
    max_jobs: int | None = None
    max_memory_mb: int | None = None
    log_level: int | None = None


def load_app(target: str) -> Any:
    """The App at ``module:attr``, imported here (a clear error when it is not one)."""
    from echomq.app.app import App

    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        raise TypeError(f"{target} is not an echomq.App")
    return app


def rss_mb() -> float:
    """This process's resident set size in MiB (``/proc/self/statm``; without ``/proc``,
    the peak RSS ``getrusage`` knows, which only grows)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB; bytes on macOS
        return peak / (1 << 20 if sys.platform == "darwin" else 1 << 10)


class Child:
    """The worker of one child process and the threads that watch it."""

    def __init__(self, spec: ChildSpec, pipe: Pipe) -> None:
        self.spec = spec
        self.pipe = pipe
        self._send_lock = threading.Lock()
        self._released: list[tuple[str, str, int]] = []
        self._released_lock = threading.Lock()
        self._recycling = threading.Event()
        self._orphaned = threading.Event()
        self.settles = 0
        self.worker: Any = None

    # -- the pipe to the supervisor -------------------------------------------------

    def send(self, message: tuple[Any, ...]) -> None:
        """One message to the supervisor; a supervisor gone stops this child."""
        try:
            with self._send_lock:
                self.pipe.send(message)
        except OSError:
            self._orphan("its pipe closed")

    def held(self, jobs: list[Any]) -> None:
        """Sent at once: a job the supervisor does not know of would wait for its lease."""
        self.send(("held", [(j.queue, j.id, j.token, j.name) for j in jobs]))

    def released(self, jobs: list[Any]) -> None:
        """Gathered and sent in batches (a pipe write per job costs a fifth of a no-op
        job's throughput): a late release only makes the supervisor try to fail a job
        that already left, which its token refuses."""
        with self._released_lock:
            self._released.extend((j.queue, j.id, j.token) for j in jobs)
            full = len(self._released) >= RELEASE_BATCH
        if full:
            self.flush_released()

    def flush_released(self) -> None:
        with self._released_lock:
            released, self._released = self._released, []
        if released:
            self.send(("released", released))

    def settled(self, job: Any, kind: str) -> None:
        user = self.spec.options.get("on_settled")
        if user is not None:
            user(job, kind)
        self.settles += 1
        if self.spec.max_jobs is not None and self.settles >= self.spec.max_jobs:
            self._recycle(f"{self.settles} jobs settled (max_jobs_per_process "
                          f"{self.spec.max_jobs})")

    # -- stopping ---------------------------------------------------------------------

    def _recycle(self, reason: str) -> None:
        """Stop gracefully once: current jobs finish, unstarted ones are handed back."""
        if self._recycling.is_set():
            return
        self._recycling.set()
        log.info("recycling: %s", reason)
        self.send(("recycle", reason))
        self.worker.stop()

    def _orphan(self, why: str) -> None:
        """The supervisor is gone: a forced stop (hand back now), exit soon whatever."""
        if self._orphaned.is_set():
            return
        self._orphaned.set()
        log.warning("supervisor gone (%s): stopping now", why)
        if self.worker is not None:
            self.worker.stop()
            self.worker.stop()
        timer = threading.Timer(ORPHAN_EXIT_S, os._exit, args=(1,))
        timer.daemon = True
        timer.start()

    def _watch(self) -> None:
        """Every :data:`PARENT_CHECK_S`: is the supervisor there, is RSS under its bound?"""
        while not self._orphaned.wait(PARENT_CHECK_S):
            self.flush_released()
            if os.getppid() != self.spec.parent_pid:
                self._orphan(f"parent {self.spec.parent_pid} exited")
                return
            limit = self.spec.max_memory_mb
            if limit is not None and not self._recycling.is_set():
                rss = rss_mb()
                if rss > limit:
                    self._recycle(f"RSS {rss:.0f} MiB over max_memory_mb {limit}")

    # -- the life of the child ----------------------------------------------------------

    def start(self) -> None:
        """Import the App, connect and build the worker (raises what went wrong)."""
        from echomq.app.worker import Worker

        spec = self.spec
        app = load_app(spec.target)
        app.adopt(connection.connect(spec.url, spec.executor, prefix=spec.prefix,
                                     payload_limit=spec.payload_limit,
                                     cluster=spec.cluster))
        options = {**spec.options, "on_settled": self.settled, "on_held": self.held,
                   "on_released": self.released}
        if spec.concurrency == 1:  # a run past its timeout plus grace ends this process
            options.setdefault("hard_timeout", "exit")
        self.worker = Worker(app, spec.queues, concurrency=spec.concurrency, **options)
        record = self.worker.consumer.heartbeat
        if record is not None:  # the dashboard shows it under its supervisor
            record.describe(kind="child", parent_pid=spec.parent_pid)

    def run(self) -> int:
        """Work until the supervisor's SIGTERM (a second one forces), a recycle or the
        supervisor's death; the exit status."""
        signal.signal(signal.SIGTERM, lambda _s, _f: self.worker.stop())
        threading.Thread(target=self._watch, name="emq-child-watch", daemon=True).start()
        self.send(("ready", os.getpid()))
        try:
            self.worker.run(install_signals=False)
        except Exception as exc:  # noqa: BLE001 - the supervisor settles and replaces
            log.error("worker crashed: %r", exc)
            return 1
        finally:
            self.flush_released()
        return 0


def main(spec: ChildSpec, pipe: Pipe) -> None:
    """A spawned child's entry point (``multiprocessing`` calls it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor forwards a Ctrl-C
    if spec.log_level is not None:
        logging.basicConfig(level=spec.log_level, format=LOG_FORMAT, force=True)
    child = Child(spec, pipe)
    try:
        child.start()
    except BaseException as exc:  # noqa: BLE001 - told to the supervisor, which gives up
        message = f"{type(exc).__name__}: {exc}"
        log.error("cannot start a worker for %s: %s", spec.target, message)
        with contextlib.suppress(OSError):
            pipe.send(("failed", message))
        _exit(START_FAILED)
    code = child.run()
    _exit(code)


def _exit(code: int) -> None:
    """Leave now: a handler stuck in C must not keep a stopped child alive."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
