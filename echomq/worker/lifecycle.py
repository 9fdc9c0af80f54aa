"""The edges of a Consumer's run that are not its parts: the signal handlers it installs
for its run (SIGTERM, SIGINT: a first one finishes running jobs, a second exits now), the
wait for a server that is restarting or loading its data before anything starts, and what
happens to the jobs it holds when it stops (or ends its process past a timeout)."""

from __future__ import annotations

import logging
import os
import queue as stdlib_queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from echomq.errors import ConnectionFailed
from echomq.queue.connection import Connection
from echomq.worker.heartbeat import Heartbeat
from echomq.worker.held import Held, take_unstarted
from echomq.worker.queues import QueuePlan
from echomq.worker.settler import Settler

log = logging.getLogger("echomq.consumer")

SETTLE_FLUSH_S = 5.0
"""How long a stop waits for finished outcomes to settle before handing anything back."""
BEAT_JOIN_S = 5.0
"""How long a stop waits for a beat in flight before it removes the worker's record."""
RELAY_JOIN_S = 5.0
"""How long putting the signal handlers back waits for a signal being handled."""
TIMEOUT_EXIT_CODE = 75
"""A process's exit status after ``hard_timeout="exit"`` ended it (its supervisor replaces it)."""


def install_signals(stop: Callable[[], None], stopping: threading.Event
                    ) -> Callable[[], None] | None:
    """Route SIGTERM and SIGINT to ``stop`` (on the main thread only, through
    :func:`relay_signals`); the function returned puts the previous handlers back."""
    def on_signal(signum: int) -> None:
        log.info("signal %s: %s", signal.Signals(signum).name,
                 "exiting now" if stopping.is_set() else "finishing running jobs")
        stop()

    return relay_signals(on_signal)


def relay_signals(on_signal: Callable[[int], None]) -> Callable[[], None] | None:
    """Call ``on_signal(signum)`` for each SIGTERM and SIGINT, from a thread of its own
    (installed from the main thread only; None elsewhere); the function returned puts
    the previous handlers back.

    A handler runs in the main thread between two bytecodes, possibly inside a lock that
    thread holds (an Event's, a plain Lock), and stopping takes such locks: called from
    the handler, a stop could wait for itself for ever. So the handler only writes the
    signal's number to a pipe.

    The thread owns the pipe's read end and closes it when it ends: a stop that outlasts
    ``restore``'s wait then reads the end-of-signals byte from its own pipe, never a
    descriptor closed under it or since opened again for something else."""
    if threading.current_thread() is not threading.main_thread():
        return None
    read_fd, write_fd = os.pipe()

    def relay() -> None:
        try:
            while (got := os.read(read_fd, 1)) and got != b"\0":
                try:
                    on_signal(got[0])
                except Exception:  # the next signal still finds a reader (and a stop)
                    log.exception("handling signal %d failed", got[0])
        finally:
            os.close(read_fd)

    thread = threading.Thread(target=relay, name="emq-signals", daemon=True)
    thread.start()

    def handler(signum: int, _frame: object) -> None:
        os.write(write_fd, bytes([signum]))

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for signum, old in previous.items():
            signal.signal(signum, old)
        os.write(write_fd, b"\0")  # the handlers are gone: nothing writes after this
        os.close(write_fd)
        thread.join(RELAY_JOIN_S)

    return restore


def wait_for_server(conn: Connection, queues: Sequence[str], record: bool,
                    stopped: threading.Event) -> None:
    """Declare the stream (or just reach the server), riding out a server that is
    restarting or loading its data, as the claim loop does, until ``stopped``."""
    failures = 0
    while not stopped.is_set():
        try:
            if record:
                from echomq.queue.declared import declare

                for queue in queues:
                    declare(conn, queue)
            else:
                conn.redis.ping()
            return
        except (ConnectionFailed, redis.ConnectionError, redis.TimeoutError) as exc:
            failures += 1
            delay = min(5.0, 0.1 * 2**failures)
            log.warning("server not ready (%s); retrying in %.1fs", exc, delay)
            stopped.wait(delay)


def described(plan: QueuePlan) -> str:
    """The queues for log lines: ``'mail'``, or ``queues high, mail`` (``high:5, ...``)."""
    if len(plan.names) == 1:
        return repr(plan.names[0])
    return f"queues {plan.describe()}"


def settle_and_hand_back(held: Held, work: stdlib_queue.SimpleQueue[Any], settler: Settler,
                         grace_s: float, force: threading.Event) -> None:
    """Hand back unstarted jobs at once, give running ones the grace period, settle
    every finished outcome, then hand back the unfinished rest so another worker
    can take them without waiting. A job whose handler finished is never handed
    back: its outcome settles (or, with the server gone, its lease lapses)."""
    held.hand_back(take_unstarted(work))
    held.wait_drained(time.monotonic() + grace_s, force)
    if not settler.flush(SETTLE_FLUSH_S):
        log.warning("finished outcomes still settling after %.0fs", SETTLE_FLUSH_S)
    # a dead settler will never settle what finished: hand those back too
    held.hand_back(held.take_unfinished(finished_too=not settler.alive))
    settler.stop(give_up=True)


def leave(record: Heartbeat | None, stopped: threading.Event,
          beat: threading.Thread | None) -> None:
    """After the hand-back (the beat renews leases through the grace period): end the
    beat, so no record is written after it goes, then take the worker's record away."""
    if record is None:
        return
    stopped.set()
    if beat is not None:
        beat.join(BEAT_JOIN_S)
    record.leave()


def exit_after_timeout(settler: Settler, held: Held, work: stdlib_queue.SimpleQueue[Any],
                       where: str) -> None:
    """``hard_timeout="exit"``: a run outlived its timeout plus grace in a process of its
    own: settle it, hand back what is buffered and end the process at once; the
    supervisor replaces it."""
    settler.flush(SETTLE_FLUSH_S)
    take_unstarted(work)  # no slot starts them now
    with held.lock:  # every held job no slot started: buffered, or claimed a moment ago
        unstarted = held.unfinished(started_too=False)
    held.hand_back(unstarted)
    log.error("consumer on %s: a run outlived its timeout plus grace; exiting (%d)",
              where, TIMEOUT_EXIT_CODE)
    logging.shutdown()
    os._exit(TIMEOUT_EXIT_CODE)


def log_stopped(where: str, s: Settler) -> None:
    """The stop's line: what this Consumer settled, by outcome."""
    log.info("consumer on %s stopped: %d completed, %d cancelled, %d failed "
             "(%d retried, %d dead)", where, s.completed - s.cancelled,
             s.cancelled, s.failed, s.retried, s.dead)
