"""An App the process-worker tests run (``emq worker tests.support.proc_tasks:app
--processes N``); its queue comes from ``$EMQ_TEST_QUEUE``, so each test has its own.

With ``$EMQ_TEST_FAIL_IN_CHILD`` set, importing it in a spawned child raises: a module
the supervisor imports but its children cannot. ``$EMQ_TEST_SLOW_CHILD`` (seconds) makes
a child's import that slow, so a test can kill children while they start."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import echomq

if os.environ.get("EMQ_TEST_FAIL_IN_CHILD") and multiprocessing.parent_process() is not None:
    raise ImportError("tests.support.proc_tasks refuses to load in a child process")
if os.environ.get("EMQ_TEST_SLOW_CHILD") and multiprocessing.parent_process() is not None:
    time.sleep(float(os.environ["EMQ_TEST_SLOW_CHILD"]))  # a child that is slow to start

app = echomq.App()
QUEUE = os.environ.get("EMQ_TEST_QUEUE", "procs")
_hoard: list[bytes] = []


@app.task(queue=QUEUE, name="procs.pid", max_attempts=3, backoff=echomq.Fixed(1))
def pid() -> int:
    """The pid of the child that ran it."""
    return os.getpid()


@app.task(queue=QUEUE, name="procs.stuck", max_attempts=1, timeout_s=0.5,
          timeout_grace_s=0.5)
def stuck(seconds: float) -> None:
    """Blocked in C past its timeout: only ending its process frees the slot."""
    time.sleep(seconds)


@app.task(queue=QUEUE, name="procs.hold", max_attempts=3, backoff=echomq.Fixed(1))
def hold(marker: str, seconds: float) -> int:
    """Appends this child's pid to the file ``marker`` (one line per run), then sleeps."""
    with Path(marker).open("a") as out:
        out.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return os.getpid()


@app.task(queue=QUEUE, name="procs.hog", max_attempts=3, backoff=echomq.Fixed(1))
def hog(mb: int) -> int:
    """Keeps ``mb`` MiB for the life of the process (touched, so it counts in RSS)."""
    _hoard.append(b"x" * (mb << 20))
    return os.getpid()


@app.task(queue=QUEUE, name="procs.die", max_attempts=2, backoff=echomq.Fixed(1))
def die() -> None:
    """Kills the process that runs it, every time."""
    os.kill(os.getpid(), 9)


@app.task(queue=QUEUE, name="procs.work", max_attempts=20, backoff=echomq.Fixed(1))
def work(marker: str, ms: int) -> int:
    """Appends "job-id pid" to ``marker`` as it starts (one line per run), then sleeps."""
    job = echomq.current_job()
    with Path(marker).open("a") as out:
        out.write(f"{job.id if job else '-'} {os.getpid()}\n")
    time.sleep(ms / 1000)
    return os.getpid()
