"""The slice: the unit the driver folds, uploads as one object, and restore reads back.

Bytes are deterministic (same entries, same bytes): a JSON header line, then one
canonical JSON line per raw stream entry, gzip-compressed with ``mtime=0``. The object
name carries the first and last stream ids and ``prev`` (the last id of the slice before,
``0-0`` for the first) in fixed-width digits, so listing a queue's slices in name order is
listing history in order, and a missing slice shows as a broken ``prev`` link without
downloading anything.

The slices form a hash chain: each header carries ``prev_digest``, the digest of the slice
before it (``""`` for the first), and a slice's own ``digest`` is the sha256 of its
uncompressed bytes (header included). Rewriting, dropping or reordering any slice therefore
changes every digest after it; the manifest and the floor keep those digests to compare
against. The digest is taken before compression so that another zlib, which may compress
the same entries differently, still yields the same digest (``sha256`` is the object's
transport checksum, over the compressed bytes).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import operator
import re
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any

import orjson

from echomq.archive.quiet_gc import quiet_gc
from echomq.archive.stream_ids import id_key, id_lt, parse_stream_id, wide_id
from echomq.errors import InvalidArgument, SliceCorrupt

FORMAT = "emq-slice/2"
OLD_FORMATS = ("emq-slice/1",)
GENESIS = ""
"""The ``prev_digest`` of a queue's first slice."""
SUFFIX = ".jsonl.gz"
_WIDE_ID = r"([0-9]{20})-([0-9]{20})"
_NAME = re.compile(rf"(?P<queue>[^/]+)/slices/{_WIDE_ID}_{_WIDE_ID}_{_WIDE_ID}\.jsonl\.gz\Z")

_PLAIN_IDS = re.compile(r"[0-9]{1,19}-[0-9]{1,19}(?:\n[0-9]{1,19}-[0-9]{1,19})*")
"""A slice's ids joined by newlines, when every one is plain ASCII ``ms-seq`` digits (19
at most: every such number is an exact integer below 2**64, never a float)."""
_PLAIN_KEY = struct.Struct(">QQ")
_GET_ID, _GET_FIELDS = operator.itemgetter("id"), operator.itemgetter("fields")
_STR = frozenset({str})

RawItem = tuple[str, Mapping[str, str], bytes]
"""One raw entry: stream id, its fields, and its canonical line (see ``entry_line``)."""


def slice_name(queue: str, first: str, last: str, prev: str) -> str:
    """``{queue}/slices/{first}_{last}_{prev}.jsonl.gz`` (relative to the remote's prefix)."""
    return f"{queue}/slices/{wide_id(first)}_{wide_id(last)}_{wide_id(prev)}{SUFFIX}"


@dataclass(frozen=True, slots=True)
class SliceRef:
    """What an object name says about a slice."""

    queue: str
    first: str
    last: str
    prev: str

    @property
    def name(self) -> str:
        return slice_name(self.queue, self.first, self.last, self.prev)

    def sort_key(self) -> tuple[tuple[int, int], tuple[int, int]]:
        return parse_stream_id(self.first), parse_stream_id(self.last)


@dataclass(frozen=True, slots=True)
class SliceMeta:
    """A slice's header plus the checksum and size of its object bytes."""

    queue: str
    first: str
    last: str
    prev: str
    count: int
    sha256: str
    size: int
    digest: str = ""
    prev_digest: str = GENESIS

    @property
    def name(self) -> str:
        return slice_name(self.queue, self.first, self.last, self.prev)

    @property
    def ref(self) -> SliceRef:
        return SliceRef(self.queue, self.first, self.last, self.prev)

    def to_json(self) -> dict[str, object]:
        return {
            "queue": self.queue, "first": self.first, "last": self.last, "prev": self.prev,
            "count": self.count, "sha256": self.sha256, "size": self.size,
            "digest": self.digest, "prev_digest": self.prev_digest,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> SliceMeta:
        return cls(
            queue=str(obj["queue"]), first=str(obj["first"]), last=str(obj["last"]),
            prev=str(obj["prev"]), count=int(obj["count"]),  # type: ignore[call-overload]
            sha256=str(obj["sha256"]), size=int(obj["size"]),  # type: ignore[call-overload]
            digest=str(obj.get("digest", "")), prev_digest=str(obj.get("prev_digest", GENESIS)),
        )


@dataclass(frozen=True, slots=True)
class SliceContent:
    """A slice with its object bytes and its raw entries."""

    meta: SliceMeta
    data: bytes
    items: Sequence[RawItem]


def parse_slice_name(name: str) -> SliceRef:
    """The slice an object name (relative to the prefix) denotes; ``ValueError`` if none."""
    match = _NAME.search(name)
    if match is None or not (match.start() == 0 or name[match.start() - 1] == "/"):
        raise ValueError(f"not a slice object name: {name!r}")
    g = match.groups()
    ids = [f"{int(g[i])}-{int(g[i + 1])}" for i in (1, 3, 5)]
    return SliceRef(match.group("queue"), ids[0], ids[1], ids[2])


def _header(queue: str, first: str, last: str, prev: str, count: int,
            prev_digest: str) -> bytes:
    head = {"format": FORMAT, "queue": queue, "first": first, "last": last, "prev": prev,
            "count": count, "prev_digest": prev_digest}
    return json.dumps(head, separators=(",", ":")).encode()


def build_slice(queue: str, prev: str, items: Sequence[RawItem], level: int = 1,
                *, encode: bool = True, prev_digest: str = GENESIS) -> SliceContent:
    """Encode ``items`` (in stream order, all after ``prev``) as one slice object chained
    to the slice before it by ``prev_digest``.

    ``encode=False`` skips the object bytes (no checksums, ``data`` empty): a floor-only
    fold never uploads them, and they are rebuilt from the floor if a remote comes later.
    """
    if not items:
        raise InvalidArgument("a slice needs at least one entry")
    first, last = items[0][0], items[-1][0]
    if not id_lt(prev, first):
        raise InvalidArgument(f"slice starting at {first} must come after prev {prev}")
    if not encode:
        return SliceContent(SliceMeta(queue, first, last, prev, len(items), "", 0), b"", items)
    header = _header(queue, first, last, prev, len(items), prev_digest)
    body = b"\n".join([header] + [i[2] for i in items]) + b"\n"
    data = gzip.compress(body, compresslevel=level, mtime=0)
    meta = SliceMeta(queue, first, last, prev, len(items), hashlib.sha256(data).hexdigest(),
                     len(data), hashlib.sha256(body).hexdigest(), prev_digest)
    return SliceContent(meta, data, items)


def decode_slice(data: bytes, ref: SliceRef | None = None, where: str = "") -> SliceContent:
    """Decode and check a slice object: gzip, header, order, count, and the name's ids.

    Anything wrong raises :class:`SliceCorrupt` naming ``where`` (the object's address).
    """
    label = where or (ref.name if ref else "slice")
    try:
        text = gzip.decompress(data)
        lines = text.split(b"\n")
        if lines[-1] != b"":
            raise ValueError("the last line is not terminated")
        head = json.loads(lines[0])
        _check_format(head.get("format"))
        queue, first, last, prev = (str(head[k]) for k in ("queue", "first", "last", "prev"))
        prev_digest = str(head["prev_digest"])
        count = int(head["count"])
        body = lines[1:-1]
        if len(body) != count:
            raise ValueError(f"header says {count} entries, body has {len(body)}")
        # One C-level parse for the whole body; a line that is not exactly one JSON
        # object shows up as a count mismatch.
        with quiet_gc():  # tens of thousands of young dicts: no GC pass finds garbage
            objs = _loads(b"[" + b",".join(body) + b"]") if body else []
            if len(objs) != len(body):
                raise ValueError("an entry line is not one JSON object")
            items = _entry_items(objs, body, prev)
        if not items or items[0][0] != first or items[-1][0] != last:
            raise ValueError("the header's first/last ids do not match the entries")
        if ref is not None and (ref.queue, ref.first, ref.last, ref.prev) != (
            queue, first, last, prev,
        ):
            raise ValueError("the header does not match the object name")
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError,
            AttributeError, RecursionError) as exc:  # JSON nested past the stack's depth
        raise SliceCorrupt(f"{label}: corrupt slice object ({exc})") from exc
    meta = SliceMeta(queue, first, last, prev, count, hashlib.sha256(data).hexdigest(),
                     len(data), hashlib.sha256(text).hexdigest(), prev_digest)
    return SliceContent(meta, data, items)


def _entry_items(objs: list[Any], body: list[bytes], prev: str) -> list[RawItem]:
    """The slice's entries as raw items, each checked: ids after ``prev`` in strictly
    increasing order, fields a dict of strings (``ValueError`` or the error of the first
    bad entry otherwise).

    The common slice is checked column by column in C-level passes (every id plain ASCII
    ``ms-seq`` digits, compared as integers); anything else, or any doubt, goes through
    :func:`_entry_items_one_by_one`, the entry-at-a-time rules, which then also say
    what is wrong.
    """
    previous = list(_PLAIN_KEY.unpack(id_key(prev)))
    try:
        sids = list(map(_GET_ID, objs))
        fields = list(map(_GET_FIELDS, objs))
        ids = "\n".join(sids)
        if objs and _PLAIN_IDS.fullmatch(ids):
            # [[ms, seq], ...] in one C-level parse (a leading zero is refused: one by one)
            keys = orjson.loads("[[" + ids.replace("-", ",").replace("\n", "],[") + "]]")
            if (len(keys) == len(sids)  # no id held a newline of its own
                    and previous < keys[0] and all(map(operator.lt, keys, islice(keys, 1, None)))
                    and set(map(type, chain.from_iterable(map(dict.values, fields)))) <= _STR):
                return list(zip(sids, fields, body, strict=True))
    except (KeyError, TypeError, orjson.JSONDecodeError):
        pass
    return _entry_items_one_by_one(objs, body, prev)


def _entry_items_one_by_one(objs: list[Any], body: list[bytes], prev: str) -> list[RawItem]:
    """:func:`_entry_items` an entry at a time, with the reason for the first bad one."""
    items: list[RawItem] = []
    previous, previous_key = prev, id_key(prev)
    only_str = {str}
    for obj, line in zip(objs, body, strict=True):
        sid, fields = obj["id"], obj["fields"]
        key = id_key(sid)
        if key <= previous_key:
            raise ValueError(f"entry {sid} is out of order after {previous}")
        if fields.__class__ is not dict or not set(map(type, fields.values())) <= only_str:
            raise ValueError(f"entry {sid} has fields that are not strings")
        items.append((sid, fields, line))
        previous, previous_key = sid, key
    return items


def _loads(text: bytes) -> Any:
    """JSON by orjson (the restore's hot parse), by the standard library when orjson
    refuses what it accepts (a lone surrogate escape): the same values either way."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _check_format(found: object) -> None:
    """Only chained slices are read: an older, unchained one cannot prove its place."""
    if found == FORMAT:
        return
    if found in OLD_FORMATS:
        raise ValueError(f"format {found!r} predates chained slices ({FORMAT}); this version "
                         "does not read it: archive that queue again into a new prefix")
    raise ValueError(f"unknown format {found!r}")
