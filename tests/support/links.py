"""A TCP link a test can hold and cut: the replication stream between two real servers.

A replica told to replicate from the link's port reaches its primary through it. While
``held``, bytes are read from both sides but not passed on (a partition: the primary
goes on acknowledging writes its replica never sees); ``cut`` closes everything and
drops what was held, as a dead machine would. ``delay_s`` makes it a slow network.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class Link:
    """Forwards every connection made to :attr:`port` on to ``upstream``."""

    def __init__(self, upstream: tuple[str, int], delay_s: float = 0.0) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        """How long each chunk waits before it is passed on (a slow network)."""
        self.held = threading.Event()
        self.held_bytes = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def hold(self) -> None:
        """Stop passing bytes on, both ways (they are read and kept back)."""
        self.held.set()

    def cut(self) -> None:
        """Close every connection and drop what was held back."""
        with self._lock:
            self._closed = True
            sockets, self._sockets = self._sockets, []
        for sock in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._listener.accept()
            except OSError:
                return
            try:
                far = socket.create_connection(self.upstream, timeout=5)
                far.settimeout(None)
            except OSError:
                near.close()
                continue
            with self._lock:
                if self._closed:
                    near.close()
                    far.close()
                    return
                self._sockets += [near, far]
            for a, b in ((near, far), (far, near)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
                return
            if self.held.is_set():
                self.held_bytes += len(data)
                continue
            if self.delay_s:
                time.sleep(self.delay_s)
            try:
                sink.sendall(data)
            except OSError:
                return
