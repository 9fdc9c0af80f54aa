"""LMDB plumbing for the floor: one environment per path, growing maps, typed scans.

LMDB forbids opening one environment twice in a process, and resizing the map while any
transaction of the process is open; both rules are kept here so the floor's own code only
says what it reads and writes.

Every LMDB failure leaves here as a :class:`FloorError` naming the floor and the cause. A
full disk is a :class:`FloorFull`, never a signal: LMDB maps its lock file and touches it
at once, and on a filesystem with no room left that touch is a SIGBUS. So the lock file is
written out (really allocated) before LMDB opens it, the free space is checked before
opening or growing, and the map never grows past what the filesystem can hold.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar, cast

import lmdb

from echomq.errors import ArchiveError, FloorError, FloorFull

T = TypeVar("T")
Txn = lmdb.Transaction
Dbs = dict[str, Any]

FILE_MODE = 0o600
"""A new floor's files (LMDB's data and lock): the owner's alone."""

LOCK_BYTES = 16 * 1024
"""What the lock file is given before LMDB opens it (LMDB needs ~8 KiB for 126 readers)."""
MIN_FREE_BYTES = 256 * 1024
"""Free space a floor needs to open (its first pages) or to grow by at least this much."""


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _data_bytes(path: str) -> int:
    try:
        return os.path.getsize(os.path.join(path, "data.mdb"))
    except OSError:
        return 0


def _lmdb_failure(path: str, what: str, exc: BaseException) -> FloorError:
    """The archive's error for an LMDB (or OS) failure at ``path``."""
    full = isinstance(exc, lmdb.DiskError) or getattr(exc, "errno", None) == errno.ENOSPC
    if not full:  # LMDB reports a short write of a full disk as EIO: look at the disk
        with suppress(OSError):
            full = free_bytes(path) < MIN_FREE_BYTES
    if full:
        return FloorFull(f"the floor at {path}: {what} failed, the disk is full "
                         f"({free_bytes(path)} bytes free): {exc}")
    return FloorError(f"the floor at {path}: {what} failed: {type(exc).__name__}: {exc}")


def _reserve_lock_file(path: str) -> None:
    """Write out a new lock file's bytes, so LMDB's mapping of it is backed by real blocks.

    LMDB extends the lock file with ftruncate, which succeeds on a full filesystem and
    leaves a hole; its first touch of that hole is then a SIGBUS. An existing lock file
    (maybe in use by another process) is left alone.
    """
    lock = os.path.join(path, "lock.mdb")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return
    try:
        os.write(fd, bytes(LOCK_BYTES))
    except OSError:
        os.close(fd)
        os.unlink(lock)
        raise
    os.close(fd)


def _open_env(path: str, names: tuple[str, ...], map_size: int) -> lmdb.Environment:
    """Open (creating) the environment, refusing a full filesystem before LMDB sees it."""
    try:
        # a new floor is its owner's alone (the history holds payloads and results): the
        # folder 0700, LMDB's files 0600; an existing folder keeps the modes it was given
        Path(path).mkdir(parents=True, exist_ok=True, mode=0o700)
        free = free_bytes(path)
        if free < MIN_FREE_BYTES and not os.path.exists(os.path.join(path, "data.mdb")):
            raise FloorFull(f"the floor at {path} cannot be created: {free} bytes free, "
                            f"{MIN_FREE_BYTES} needed")
        _reserve_lock_file(path)
        size = min(map_size, _data_bytes(path) + free)
        # room for the sub-databases of older formats, which a migration opens to drop
        return lmdb.open(path, map_size=size, max_dbs=len(names) + 4, subdir=True,
                         mode=FILE_MODE)
    except (lmdb.Error, OSError) as exc:
        raise _lmdb_failure(path, "opening", exc) from exc


class _Shared:
    """One LMDB environment per path per process (LMDB forbids opening it twice)."""

    def __init__(self, path: str, names: tuple[str, ...], map_size: int) -> None:
        self.env = _open_env(path, names, map_size)
        try:
            self.dbs = {name: self.env.open_db(name.encode()) for name in names}
        except lmdb.Error as exc:
            self.env.close()
            raise _lmdb_failure(path, "opening its databases", exc) from exc
        self.file = _identity(path)
        self.refs = 0
        self.write_lock = threading.Lock()
        self.readers = 0
        self.idle = threading.Condition()


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the floor's data file now; None when there is none."""
    try:
        found = os.stat(os.path.join(path, "data.mdb"))
    except OSError:
        return None
    return found.st_dev, found.st_ino


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

    @property
    def dbs(self) -> Dbs:
        """The named sub-databases, by name."""
        return self._s.dbs

    def used_bytes(self) -> int:
        """Bytes of the map in use (pages written)."""
        info, stat = self.env.info(), self.env.stat()
        return int((info["last_pgno"] + 1) * stat["psize"])

    def check_in_place(self) -> None:
        """Raise :class:`FloorError` when the floor's data file is no longer the one this
        process opened (its folder removed, moved or replaced while open): writes would go
        on into a file nobody can open again, so nothing may be trimmed against them."""
        if _identity(self.path) != self._s.file:
            raise FloorError(
                f"the floor at {self.path} was removed or replaced while this process had it "
                "open: nothing more is trimmed or marked folded against it. Restart with the "
                "floor in place (restore it from the bucket when it had one)")

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
    def read(self) -> Iterator[tuple[lmdb.Transaction, dict[str, Any]]]:
        """A read snapshot (MVCC: never blocks the writer) and the sub-databases."""
        s = self._s
        with s.idle:
            s.readers += 1
        try:
            try:
                txn = s.env.begin(buffers=False)
            except lmdb.Error as exc:
                raise _lmdb_failure(self.path, "a read", exc) from exc
            with txn:
                try:
                    yield txn, s.dbs
                except lmdb.Error as exc:
                    raise _lmdb_failure(self.path, "a read", exc) from exc
        finally:
            with s.idle:
                s.readers -= 1
                s.idle.notify_all()

    def write(self, fn: Callable[[lmdb.Transaction, dict[str, Any]], T]) -> T:
        """Run ``fn`` in one write transaction, growing the map until it fits."""
        s = self._s
        with s.write_lock:
            while True:
                try:
                    with s.env.begin(write=True) as txn:
                        return fn(txn, s.dbs)
                except lmdb.MapFullError:
                    self._resize(s, self._grown_size(s))
                except lmdb.MapResizedError:
                    self._resize(s, 0)  # another process grew it: adopt its size
                except (lmdb.Error, OSError) as exc:
                    raise _lmdb_failure(self.path, "a write", exc) from exc

    def _grown_size(self, s: _Shared) -> int:
        """Double the map, but never past what the filesystem can still hold."""
        current = int(s.env.info()["map_size"])
        room = _data_bytes(self.path) + free_bytes(self.path)
        size = min(current * 2, room)
        if size <= current:
            raise FloorFull(f"the floor at {self.path} is full ({current} bytes mapped) and "
                            f"the disk has {free_bytes(self.path)} bytes free: it cannot grow")
        return size

    def _resize(self, s: _Shared, size: int) -> None:
        with s.idle:  # LMDB: no transaction of this process may be open during a resize
            s.idle.wait_for(lambda: s.readers == 0)
            try:
                s.env.set_mapsize(size)
            except lmdb.Error as exc:
                raise _lmdb_failure(self.path, "growing the map", exc) from exc
        self.grows += 1


def scan(txn: lmdb.Transaction, db: Any, prefix: bytes, start: bytes | None = None
         ) -> Iterator[tuple[bytes, bytes]]:
    """Key/value pairs whose key starts with ``prefix``, from ``start`` on, in order."""
    cur = txn.cursor(db=db)
    if not cur.set_range(start or prefix):
        return
    for key, value in cur:
        if not cast(bytes, key).startswith(prefix):
            return
        yield cast(bytes, key), cast(bytes, value)


def must_get(txn: lmdb.Transaction, db: Any, key: bytes) -> bytes:
    """The value at ``key``, which the floor's own records say is there."""
    value = txn.get(key, db=db)
    if value is None:
        raise ArchiveError(f"the floor is inconsistent: {key!r} is missing")
    return cast(bytes, value)
