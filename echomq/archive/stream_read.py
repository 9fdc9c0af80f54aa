"""Every read of the outcome stream (a slice in pages, ids, ``XINFO STREAM``), decoded
without losing a byte.

The stream holds whatever its writers put there. What the queue writes is UTF-8 and is
read decoded by the client (hiredis, in C). A field that is not UTF-8 (another writer's
``XADD``, a payload stored as raw bytes) makes that decode fail; the range is then read
again undecoded, and each value decoded with ``surrogateescape``, which turns every stray
byte into a lone surrogate and back again. The fold quarantines such an entry with its
exact bytes (see ``entries.malformed_reason``) instead of failing on every pass while the
stream grows.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any, cast

import redis
from redis.client import NEVER_DECODE

from echomq.archive import accel
from echomq.archive.entries import REPEAT, entry_line
from echomq.archive.slices import RawItem

RawEntry = tuple[str, list[str]]
"""A stream entry as read: its id and its fields flattened (name, value, name, ...)."""


def read_range(client: Any, key: str, lo: str, hi: str, count: int, *,
               fast: redis.Redis | None = None) -> list[RawEntry]:
    """Up to ``count`` entries of ``key`` from ``lo`` to ``hi`` (``XRANGE`` bounds: an id,
    ``(id`` to exclude it, ``-``, ``+``).

    ``fast`` is a client on the same pool whose ``XRANGE`` replies skip redis-py's
    per-entry parsing (none on a Cluster: ``client`` reads through its own routing)."""
    args = ("XRANGE", key, lo, hi, "COUNT", count)
    target = fast if fast is not None else client
    try:
        return _flat(target.execute_command(*args))
    except UnicodeDecodeError:
        # redis-py dropped the connection mid-reply; a read has no effect to repeat
        return [(_text(sid), [_text(value) for value in flat])
                for sid, flat in _flat(target.execute_command(*args, **UNDECODED))]


FIRST_PAGE = 16
"""Entries read first when a queue's entry size is not known yet."""

PAGE = 1_000
"""The most entries one ``XRANGE`` asks for. Measured on folds of 200,000 (the README's
benchmarks): pages of 1,000 cost both the client and the server less CPU per entry than
a whole slice of 10,000 in one reply (measured, not explained: likely replies that stay
in the CPU's caches), and keep the round trips few."""

_PIPE_FAILED = (redis.ConnectionError, redis.TimeoutError, UnicodeDecodeError)
"""What makes a pipelined read hand the rest of its slice to the plain loop, which has
redis-py's retries and the undecoded fallback."""


def read_items(client: Any, key: str, after: str, end: str, *, count: int, max_bytes: int,
               entry_bytes: float | None, fast: redis.Redis | None = None
               ) -> tuple[list[RawItem], float | None]:
    """A slice's entries after ``after`` up to ``end``: at most ``count``, and no more
    than ``max_bytes`` of lines (but at least one), with each one's canonical line; and
    the mean line size seen, to pass back as ``entry_bytes`` next time.

    Pages are sized from ``entry_bytes``, so a slice of large entries (recorded payloads
    of hundreds of KB) reads about what it keeps, not ``count`` entries to keep a few.
    With ``fast`` (one server, see :func:`read_range`) the next page is asked for before
    the one in hand is taken, so the server's ``XRANGE`` work overlaps ours.
    """
    read = _Slice(count, max_bytes, entry_bytes)
    if fast is not None:
        with suppress(*_PIPE_FAILED):  # what was taken stands; the plain loop reads on
            _read_ahead(fast, key, after, end, read)
    if not read.done:
        lo = f"({read.items[-1][0] if read.items else after}"
        while not read.done:
            page = read.page()
            raw = read_range(client, key, lo, end, page, fast=fast)
            read.take(raw, page)
            if raw:
                lo = f"({raw[-1][0]}"
    return read.items, read.entry_bytes


def _read_ahead(fast: redis.Redis, key: str, after: str, end: str, read: _Slice) -> None:
    """Read ``read``'s pages on one connection of ``fast``'s pool, each next page asked for
    before the one in hand is taken. A page asked for but not needed is read and dropped,
    and a connection that failed mid-reply is closed, so the pool never gets one back
    with a reply pending."""
    pool = fast.connection_pool
    conn: Any = pool.get_connection()  # redis-py leaves the connection untyped
    try:
        asked = read.page()
        conn.send_command("XRANGE", key, f"({after}", end, "COUNT", asked)
        while True:
            raw, page = conn.read_response(), asked
            asked = read.ahead(len(raw), page)
            if asked:
                conn.send_command("XRANGE", key, f"({raw[-1][0]}", end, "COUNT", asked)
            read.take(raw, page)
            if read.done:
                if asked:
                    conn.read_response()  # the bytes limit ended the slice a page early
                return
            if not asked:  # the entry size was not known before this page
                asked = read.page()
                conn.send_command("XRANGE", key, f"({raw[-1][0]}", end, "COUNT", asked)
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


class _Slice:
    """The items of one slice as its pages come in, and the size of the next page."""

    def __init__(self, count: int, max_bytes: int, entry_bytes: float | None) -> None:
        self.items: list[RawItem] = []
        self.count = count
        self.max_bytes = max_bytes
        self.entry_bytes = entry_bytes
        self.size = 0
        self.done = False

    def page(self, pending: int = 0) -> int:
        """Entries to ask for next, with ``pending`` read but not taken yet: at most
        :data:`PAGE`, what is left of ``count`` and, once the entry size is known, about
        what is left of ``max_bytes``; at least one when nothing is pending."""
        room = self.count - len(self.items) - pending
        if self.entry_bytes is None:
            return min(room, FIRST_PAGE)
        fits = max(1, int((self.max_bytes - self.size) / max(self.entry_bytes, 1.0)) + 1)
        return max(0, min(room, fits - pending, PAGE))

    def ahead(self, got: int, asked: int) -> int:
        """The page to ask for while ``got`` entries (of ``asked``) are still to be taken;
        0 when this page ends the slice, or may (its entry size unknown)."""
        return 0 if got < asked or self.entry_bytes is None else self.page(pending=got)

    def take(self, raw: list[RawEntry], asked: int) -> None:
        """Take a page read with ``COUNT asked``; done when the slice is full or the range
        ran out."""
        self.size, full = take(raw, self.items, self.size, self.max_bytes)
        if self.items:
            self.entry_bytes = self.size / len(self.items)
        self.done = full or len(raw) < asked or len(self.items) >= self.count


def take(raw: list[RawEntry], items: list[RawItem], size: int, max_bytes: int
         ) -> tuple[int, bool]:
    """Append ``raw`` entries to ``items`` as (id, fields, line) until one would take the
    lines past ``max_bytes`` (the first item is always taken); returns the new ``size``
    (each line and its newline) and whether it stopped there. In C when the accelerator
    is built (see :mod:`echomq.archive.accel`), else :func:`take_py`."""
    if accel.FOLD is not None:
        return cast("tuple[int, bool]", accel.FOLD.take(raw, items, size, max_bytes, item_of))
    return take_py(raw, items, size, max_bytes)


def take_py(raw: list[RawEntry], items: list[RawItem], size: int, max_bytes: int
            ) -> tuple[int, bool]:
    """:func:`take` in Python: the reference the accelerator is tested against."""
    for entry in raw:
        item = item_of(entry)
        grow = len(item[2]) + 1
        if items and size + grow > max_bytes:
            return size, True
        items.append(item)
        size += grow
    return size, False


def item_of(entry: RawEntry) -> RawItem:
    """One entry's (id, fields, canonical line)."""
    sid, flat = entry
    it = iter(flat)
    fields = dict(zip(it, it, strict=True))
    if 2 * len(fields) != len(flat):
        fields = with_repeats(flat)
    return sid, fields, entry_line(sid, fields)


def with_repeats(flat: list[str]) -> dict[str, str]:
    """The fields of an entry that names one field more than once (``XADD`` allows it; a
    dict would keep only the last value): every repeat kept under ``name`` + ``REPEAT`` +
    its ordinal, so the entry is quarantined with all its values."""
    fields: dict[str, str] = {}
    it = iter(flat)
    for name, value in zip(it, it, strict=True):
        key, seen = name, 1
        while key in fields:
            seen += 1
            key = f"{name}{REPEAT}{seen}"
        fields[key] = value
    return fields


def read_ids(client: Any, key: str, lo: str, count: int, hi: str = "+") -> list[str]:
    """The ids of up to ``count`` entries from ``lo`` to ``hi``, whatever bytes their
    fields hold (for counts and ages: the fields are never decoded)."""
    reply = client.execute_command("XRANGE", key, lo, hi, "COUNT", count, **UNDECODED)
    return [_text(entry[0]) for entry in reply or ()]


def last_id_through(client: Any, key: str, hi: str) -> str | None:
    """The id of the last entry at or before ``hi`` (None: none), fields never decoded."""
    reply = client.execute_command("XREVRANGE", key, hi, "-", "COUNT", 1, **UNDECODED)
    return _text(reply[0][0]) if reply else None


def stream_info(client: Any, key: str) -> dict[str, Any] | None:
    """``XINFO STREAM`` of ``key`` (None when there is no stream), its first and last
    entries decoded like :func:`read_range`'s."""
    try:
        try:
            return dict(client.xinfo_stream(key))
        except UnicodeDecodeError:
            return dict(_decoded(client.execute_command("XINFO", "STREAM", key,
                                                        **UNDECODED)))
    except redis.ResponseError:
        return None


UNDECODED = {NEVER_DECODE: True}
"""The option that makes redis-py hand back one reply's bytes as they are."""


def _decoded(value: Any) -> Any:
    if isinstance(value, bytes):
        return _text(value)
    if isinstance(value, dict):
        return {_decoded(k): _decoded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(map(_decoded, value))
    return value


def _flat(reply: Any) -> list[Any]:
    """``[(id, [name, value, ...]), ...]`` from either reply shape: the raw one, or the
    one redis-py's Cluster client parses into a dict per entry."""
    if reply and isinstance(reply[0][1], dict):
        return [(sid, [x for pair in fields.items() for x in pair]) for sid, fields in reply]
    return list(reply)


def _text(value: bytes | str) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "surrogateescape")
