"""LMDB plumbing for the floor: one environment per path, growing maps, typed scans.

LMDB forbids opening one environment twice in a process, and resizing the map while any
transaction of the process is open; both rules are kept here so the floor's own code only
says what it reads and writes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import lmdb

from echomq.errors import ArchiveError

T = TypeVar("T")
Txn = lmdb.Transaction
Dbs = dict[str, Any]


class _Shared:
    """One LMDB environment per path per process (LMDB forbids opening it twice)."""

    def __init__(self, path: str, names: tuple[str, ...], map_size: int) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(path, map_size=map_size, max_dbs=len(names), subdir=True)
        self.dbs = {name: self.env.open_db(name.encode()) for name in names}
        self.refs = 0
        self.write_lock = threading.Lock()
        self.readers = 0
        self.idle = threading.Condition()


_registry: dict[str, _Shared] = {}
_registry_lock = threading.Lock()


class LmdbStore:
    """Named sub-databases ``names`` in the LMDB environment at ``path``.

    ``map_size`` is only the starting size: the map doubles whenever a write needs more.
    Instances for the same path in one process share one environment.
    """

    def __init__(self, path: str | os.PathLike[str], names: tuple[str, ...], map_size: int
                 ) -> None:
        self.path = str(Path(path).resolve())
        with _registry_lock:
            shared = _registry.get(self.path)
            if shared is None:
                shared = _registry[self.path] = _Shared(self.path, names, map_size)
            shared.refs += 1
        self._shared: _Shared | None = shared
        self.grows = 0

    # -- plumbing -------------------------------------------------------------------------

    @property
    def _s(self) -> _Shared:
        if self._shared is None:
            raise ArchiveError(f"the floor at {self.path} is closed")
        return self._shared

    @property
    def env(self) -> lmdb.Environment:
        return self._s.env

    def close(self) -> None:
        shared, self._shared = self._shared, None
        if shared is None:
            return
        with _registry_lock:
            shared.refs -= 1
            if shared.refs == 0:
                _registry.pop(self.path, None)
                shared.env.close()

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _read(self) -> Iterator[tuple[lmdb.Transaction, dict[str, Any]]]:
        s = self._s
        with s.idle:
            s.readers += 1
        try:
            with s.env.begin(buffers=False) as txn:
                yield txn, s.dbs
        finally:
            with s.idle:
                s.readers -= 1
                s.idle.notify_all()

    def _write(self, fn: Callable[[lmdb.Transaction, dict[str, Any]], T]) -> T:
        """Run ``fn`` in one write transaction, growing the map until it fits."""
        s = self._s
        with s.write_lock:
            while True:
                try:
                    with s.env.begin(write=True) as txn:
                        return fn(txn, s.dbs)
                except lmdb.MapFullError:
                    self._resize(s, s.env.info()["map_size"] * 2)
                except lmdb.MapResizedError:
                    self._resize(s, 0)  # another process grew it: adopt its size

    def _resize(self, s: _Shared, size: int) -> None:
        with s.idle:  # LMDB: no transaction of this process may be open during a resize
            s.idle.wait_for(lambda: s.readers == 0)
            s.env.set_mapsize(size)
        self.grows += 1

    @staticmethod
    def _scan(txn: lmdb.Transaction, db: Any, prefix: bytes, start: bytes | None = None
              ) -> Iterator[tuple[bytes, bytes]]:
        """Key/value pairs whose key starts with ``prefix``, from ``start`` on, in order."""
        cur = txn.cursor(db=db)
        if not cur.set_range(start or prefix):
            return
        for key, value in cur:
            if not cast(bytes, key).startswith(prefix):
                return
            yield cast(bytes, key), cast(bytes, value)

    @staticmethod
    def _get(txn: lmdb.Transaction, db: Any, key: bytes) -> bytes:
        value = txn.get(key, db=db)
        if value is None:
            raise ArchiveError(f"the floor is inconsistent: {key!r} is missing")
        return cast(bytes, value)
