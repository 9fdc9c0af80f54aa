"""A SIGTERM that lands while the main thread holds a lock the stop needs (the claim
loop's wake-up Event takes a plain Lock on every round) must still stop the worker: the
handler only hands the signal on, and another thread calls ``stop``. Called from the
handler itself, ``stop`` waited for the main thread, which waited for the handler."""

from __future__ import annotations

import os
import signal
import threading
import time

from echomq.worker.lifecycle import install_signals


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
