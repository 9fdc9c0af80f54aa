"""A data folder only its owner can use, and the processes it may signal.

The shared server's folder holds its AOF, its log, its unix socket and the password of
its server: anyone who can write the folder can plant a state file naming their own
server (and receive the owner's jobs) or any pid (and have ``emq server stop`` kill it).
So the folder and the files the launcher reads must belong to the current user and be
writable by no one else (checked, never assumed), the folder is made 0700 and its files
0600, and a pid is signalled only once ``/proc`` says it is this user's
``valkey-server`` working in this folder (through a pidfd, so a reused pid is never hit).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from pathlib import Path

from echomq.errors import ConnectionFailed
from echomq.servers.process import pid_alive

SOCKET_PATH_MAX = 107
"""The longest unix socket path Linux takes (``sun_path`` is 108 bytes with its NUL)."""


def _why_unsafe(st: os.stat_result) -> str | None:
    """Why a folder or file with this ``stat`` is not the current user's alone, or None."""
    if st.st_uid != os.geteuid():
        return f"it is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"it is writable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                "use a folder only you can write")
    return None


def private_folder(folder: Path) -> None:
    """Create ``folder`` 0700, or check that the existing one is the current user's and
    writable by no one else (then made 0700): else a clear :class:`ConnectionFailed`."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = folder.lstat()
    except OSError as exc:
        raise ConnectionFailed(f"cannot use the data folder {folder}: {exc}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise ConnectionFailed(f"cannot use the data folder {folder}: not a folder")
    why = _why_unsafe(st)
    if why:
        raise ConnectionFailed(f"refusing the data folder {folder}: {why}")
    if stat.S_IMODE(st.st_mode) != 0o700:
        try:
            folder.chmod(0o700)
        except OSError as exc:
            raise ConnectionFailed(f"cannot make {folder} private (0700): {exc}") from exc


def tighten(folder: Path) -> None:
    """Make what the folder holds (AOF folder and files, log) 0700/0600: a folder made by
    an earlier version kept them world-readable. Symlinks and others' files are left."""
    for path in [folder, *folder.glob("*"), *folder.glob("*/*")]:
        with contextlib.suppress(OSError):
            st = path.lstat()
            if st.st_uid != os.geteuid() or stat.S_ISLNK(st.st_mode) or path == folder:
                continue
            mode = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
            if stat.S_IMODE(st.st_mode) & ~mode:
                path.chmod(mode)


def open_private(path: Path, flags: int) -> int:
    """Open ``path`` (created 0600 with ``os.O_CREAT``; a symlink is refused) and check
    that it is the current user's and writable by no one else; the descriptor."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ConnectionFailed(f"cannot use {path}: {exc}") from exc
    why = _why_unsafe(os.fstat(fd))
    if why:
        os.close(fd)
        raise ConnectionFailed(f"refusing {path}: {why}")
    return fd


def read_private(path: Path) -> str | None:
    """The text of ``path`` once checked (:func:`open_private`); None when there is none."""
    if not os.path.lexists(path):
        return None
    fd = open_private(path, os.O_RDONLY)
    with os.fdopen(fd, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once (a 0600 file beside it, then renamed)."""
    partial = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    fd = open_private(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(partial, path)


def socket_path(folder: Path, name: str) -> Path:
    """The unix socket ``name`` in ``folder``; a clear error when the path is too long."""
    path = folder / name
    size = len(os.fsencode(path))
    if size > SOCKET_PATH_MAX:
        raise ConnectionFailed(
            f"the data folder {folder} is too deep for its server's unix socket "
            f"({size} bytes; Linux takes at most {SOCKET_PATH_MAX}): use a shorter --data-dir"
        )
    return path


def folder_server(pid: int, folder: Path, exe_name: str = "valkey-server") -> bool:
    """Whether ``pid`` is, by ``/proc``, a process of the current user running
    ``exe_name`` with ``folder`` as its working folder (Valkey chdirs to its ``dir``)."""
    proc = Path(f"/proc/{pid}")
    try:
        uids = next(line for line in (proc / "status").read_text().splitlines()
                    if line.startswith("Uid:")).split()[1:]
        exe = os.readlink(proc / "exe").removesuffix(" (deleted)")
        cwd = Path(os.readlink(proc / "cwd"))
    except (OSError, StopIteration):
        return False
    return (all(int(uid) == os.geteuid() for uid in uids) and Path(exe).name == exe_name
            and cwd == folder and pid_alive(pid))


def signal_folder_server(pid: int, folder: Path, signum: int) -> bool:
    """Send ``signum`` to ``pid`` only if it is the folder's server (:func:`folder_server`);
    whether it was sent. A pidfd taken before the check pins the process: a pid reused
    between the check and the signal is never hit."""
    pidfd: int | None
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (AttributeError, OSError):  # no pidfd (an old kernel): check, then kill
        pidfd = None
    try:
        if not folder_server(pid, folder):
            return False
        with contextlib.suppress(ProcessLookupError):
            if pidfd is None:
                os.kill(pid, signum)
            else:
                signal.pidfd_send_signal(pidfd, signum)
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)
