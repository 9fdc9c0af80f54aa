"""A SIGTERM that lands while the main thread holds a lock the stop needs (the claim
loop's wake-up Event takes a plain Lock on every round) must still stop the worker: the
handler only hands the signal on, and another thread calls ``stop``. Called from the
handler itself, ``stop`` waited for the main thread, which waited for the handler."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from echomq.worker import lifecycle
from echomq.worker.lifecycle import install_signals, relay_signals


def test_a_signal_inside_a_held_lock_still_reaches_stop() -> None:
    held = threading.Lock()  # what an Event holds inside set(), clear() and wait()
    stopped = threading.Event()
    stopping = threading.Event()

    def stop() -> None:
        with held:
            stopped.set()

    restore = install_signals(stop, stopping)
    assert restore is not None  # pytest runs this on the main thread
    try:
        with held:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs here, inside the lock
        assert stopped.wait(5), "the stop never ran"
    finally:
        restore()


def test_restore_puts_the_previous_handler_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    restore = install_signals(lambda: None, threading.Event())
    assert restore is not None
    assert signal.getsignal(signal.SIGTERM) is not before
    restore()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stop_outlasting_restore_leaves_the_pipe_to_the_relay_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``restore`` waits ``RELAY_JOIN_S`` for a signal being handled; past that it goes on.
    The relay thread, when its stop ends, must not then read a descriptor ``restore``
    closed (EBADF in the thread) or one the process has since opened again for something
    else (a byte stolen from another pipe, taken for a signal)."""
    monkeypatch.setattr(lifecycle, "RELAY_JOIN_S", 0.1)
    release = threading.Event()
    got: list[int] = []

    def slow_stop(signum: int) -> None:
        got.append(signum)
        release.wait(10)

    before = set(threading.enumerate())
    restore = relay_signals(slow_stop)
    assert restore is not None
    (relay,) = set(threading.enumerate()) - before
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == [signal.SIGTERM]
    restore()  # gives up waiting while the stop still runs
    other_read, other_write = os.pipe()  # the lowest free numbers: likely the relay's
    try:
        os.write(other_write, b"x")
        release.set()
        relay.join(5)
        assert not relay.is_alive(), "the relay thread is reading another pipe"
        assert got == [signal.SIGTERM]
        os.set_blocking(other_read, False)
        assert os.read(other_read, 1) == b"x"
    finally:
        os.close(other_read)
        os.close(other_write)


def test_a_stop_that_raises_leaves_the_next_signal_a_reader(
        caplog: pytest.LogCaptureFixture) -> None:
    """A failing stop is logged and the relay goes on: a second SIGTERM (exit now) must
    still arrive, and the handler must never write to a pipe nobody reads."""
    got: list[int] = []
    second = threading.Event()

    def failing_stop(signum: int) -> None:
        got.append(signum)
        if len(got) == 1:
            raise RuntimeError("the first stop failed")
        second.set()

    restore = relay_signals(failing_stop)
    assert restore is not None
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
        assert second.wait(5), "the second signal found no reader"
    finally:
        restore()
    assert got == [signal.SIGTERM, signal.SIGTERM]
    assert "the first stop failed" in caplog.text
