"""Stream ids (``ms-seq``): parsed, compared, stepped and keyed in one place.

Redis orders a stream's entries by two unsigned 64-bit integers, so ids compare as pairs
of numbers, never as text (``"9-0"`` comes before ``"10-0"``). Every part of the archive
that orders, steps past or stores an id (the fold's trim point, the floor's keys, slice
names, the manifest's chain, a point-in-time restore) goes through these functions.
"""

from __future__ import annotations

import re
import struct

from echomq.errors import InvalidArgument

ZERO_ID = "0-0"
"""Before every entry: the checkpoint of a queue nothing was folded from yet."""
MAX_U64 = 2**64 - 1
"""The largest ms or seq part an id can have."""
_STREAM_ID = re.compile(r"([0-9]+)-([0-9]+)\Z")
_PACK = struct.Struct(">QQ").pack


def parse_stream_id(value: str) -> tuple[int, int]:
    """``"ms-seq"`` as two integers; a bare ``"ms"`` means ``ms-0``."""
    ms, sep, seq = value.partition("-")
    if sep and ms.isascii() and seq.isascii() and ms.isdigit() and seq.isdigit():
        a, b = int(ms), int(seq)  # the fast path: every id Redis hands out
        if a <= MAX_U64 and b <= MAX_U64:
            return a, b
    match = _STREAM_ID.match(value)
    if match is None:
        if value.isdigit():
            return int(value), 0
        raise InvalidArgument(f"not a stream id: {value!r}")
    first, second = int(match.group(1)), int(match.group(2))
    if first > MAX_U64 or second > MAX_U64:
        raise InvalidArgument(f"stream id out of range: {value!r}")
    return first, second


def id_key(value: str) -> bytes:
    """16 bytes whose byte order is the stream's order (big-endian ms, then seq)."""
    ms, sep, seq = value.partition("-")
    if sep and ms.isdigit() and seq.isdigit() and ms.isascii() and seq.isascii():
        try:
            return _PACK(int(ms), int(seq))
        except struct.error:
            pass  # out of range: refused below with the reason
    return _PACK(*parse_stream_id(value))


def id_from_key(raw: bytes) -> str:
    """The id whose :func:`id_key` is ``raw``."""
    return f"{int.from_bytes(raw[:8], 'big')}-{int.from_bytes(raw[8:16], 'big')}"


def id_after(value: str) -> str:
    """The smallest id greater than ``value``: the ``XTRIM MINID`` that removes ``value``."""
    ms, seq = parse_stream_id(value)
    if seq == MAX_U64:
        if ms == MAX_U64:
            return value  # the last possible id: nothing comes after it
        return f"{ms + 1}-0"
    return f"{ms}-{seq + 1}"


def id_before(value: str) -> str:
    """The greatest id smaller than ``value`` (a lost range's upper bound)."""
    ms, seq = parse_stream_id(value)
    return f"{ms}-{seq - 1}" if seq else f"{ms - 1}-{MAX_U64}"


def id_lt(a: str, b: str) -> bool:
    """Whether ``a`` comes before ``b`` in the stream."""
    return parse_stream_id(a) < parse_stream_id(b)


def last_id_of(ms: int) -> str:
    """The greatest id of millisecond ``ms``: everything written then is at or before it."""
    return f"{ms}-{MAX_U64}"


def wide_id(value: str) -> str:
    """``value`` zero-padded to 20 digits a part, so names sort as the ids do."""
    ms, seq = parse_stream_id(value)
    return f"{ms:020d}-{seq:020d}"
