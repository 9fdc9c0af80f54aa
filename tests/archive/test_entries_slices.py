"""Entry parsing, stream-id encoding, and the slice object format."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from echomq.archive.entries import (
    ArchivedEntry,
    Outcome,
    QuarantinedEntry,
    entry_line,
    parse_entry,
    parse_line,
)
from echomq.archive.manifest import MANIFEST_FORMAT, Manifest
from echomq.archive.slices import (
    SliceCorrupt,
    build_slice,
    decode_slice,
    parse_slice_name,
    slice_name,
)
from echomq.archive.stream_ids import id_after, id_from_key, id_key, id_lt
from echomq.errors import ChecksumMismatch, InvalidArgument, ManifestCorrupt

GOOD = {"job": "j1", "outcome": "dead", "result": "boom", "attempts": "3", "at": "1700",
        "created_at": "1600"}
u64 = st.integers(min_value=0, max_value=2**64 - 1)
ids = st.tuples(u64, u64).map(lambda t: f"{t[0]}-{t[1]}")


def test_a_good_entry_parses() -> None:
    entry = parse_entry("q", "5-1", GOOD)
    assert entry == ArchivedEntry("5-1", "q", "j1", Outcome.DEAD, "boom", 3, 1700, 1600)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"job": None}, "missing job"),
        ({"job": ""}, "missing job"),
        ({"job": "a:b"}, "job id"),
        ({"outcome": None}, "missing outcome"),
        ({"outcome": "failed"}, "unknown outcome"),
        ({"attempts": "three"}, "attempts"),
        ({"attempts": None}, "attempts"),
        ({"at": "1.5"}, "at"),
        ({"at": "-5"}, "at is out of range"),
    ],
)
def test_malformed_entries_are_quarantined_not_raised(change: dict[str, str | None],
                                                     reason: str) -> None:
    fields = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    item = parse_entry("q", "5-1", fields)
    assert isinstance(item, QuarantinedEntry)
    assert reason in item.reason
    assert dict(item.fields) == fields


def test_unknown_fields_and_odd_created_at_are_kept_verbatim() -> None:
    entry = parse_entry("q", "1-0", {**GOOD, "created_at": "soon", "worker": "w1"})
    assert isinstance(entry, ArchivedEntry)
    assert entry.created_at is None
    assert dict(entry.extra) == {"worker": "w1", "created_at": "soon"}


def test_started_at_is_read_and_an_entry_from_before_it_still_parses() -> None:
    entry = parse_entry("q", "5-1", {**GOOD, "started_at": "1650"})
    assert isinstance(entry, ArchivedEntry)
    assert (entry.created_at, entry.started_at, entry.extra) == (1600, 1650, ())
    assert entry.to_dict()["started_at"] == 1650
    old = parse_entry("q", "5-1", GOOD)
    assert isinstance(old, ArchivedEntry)
    assert old.started_at is None
    odd = parse_entry("q", "5-1", {**GOOD, "started_at": "later"})
    assert isinstance(odd, ArchivedEntry)
    assert (odd.started_at, dict(odd.extra)) == (None, {"started_at": "later"})


@given(ids, ids)
def test_id_key_byte_order_is_stream_order(a: str, b: str) -> None:
    assert (id_key(a) < id_key(b)) == id_lt(a, b)
    assert id_from_key(id_key(a)) == a


@given(st.tuples(st.integers(0, 2**64 - 2), u64).map(lambda t: f"{t[0]}-{t[1]}"))
def test_id_after_is_the_next_id(a: str) -> None:
    nxt = id_after(a)
    assert id_lt(a, nxt)
    assert id_key(nxt) == (int.from_bytes(id_key(a), "big") + 1).to_bytes(16, "big")


def test_bad_stream_ids_are_refused() -> None:
    for bad in ("x", "1-", "-1", "1-2-3", f"{2**64}-0"):
        with pytest.raises(InvalidArgument):
            id_key(bad)


@given(st.lists(st.tuples(ids, ids, ids), min_size=2, max_size=8))
def test_slice_names_sort_in_history_order(triples: list[tuple[str, str, str]]) -> None:
    names = [slice_name("q", f, last, p) for f, last, p in triples]
    by_name = sorted(range(len(names)), key=lambda i: names[i])
    by_ids = sorted(range(len(names)), key=lambda i: (id_key(triples[i][0]),
                                                      id_key(triples[i][1]),
                                                      id_key(triples[i][2])))
    assert [names[i] for i in by_name] == [names[i] for i in by_ids]
    for f, last, p in triples:
        ref = parse_slice_name("prefix/" + slice_name("q", f, last, p))
        assert (ref.queue, ref.first, ref.last, ref.prev) == ("q", f, last, p)


def items(n: int, start: int = 1) -> list[tuple[str, dict[str, str], bytes]]:
    out = []
    for i in range(start, start + n):
        fields = {**GOOD, "job": f"j{i}", "result": "é ünïcode"}
        out.append((f"{i}-0", fields, entry_line(f"{i}-0", fields)))
    return out


def test_slice_bytes_are_deterministic_and_round_trip() -> None:
    a = build_slice("q", "0-0", items(50))
    b = build_slice("q", "0-0", items(50))
    assert a.data == b.data and a.meta.sha256 == b.meta.sha256
    back = decode_slice(a.data, a.meta.ref)
    assert back.meta == a.meta
    assert [(i[0], dict(i[1])) for i in back.items] == [(i[0], i[1]) for i in items(50)]
    assert a.meta.name.endswith(".jsonl.gz") and a.meta.count == 50
    header = gzip.decompress(a.data).split(b"\n")[0]
    assert b'"prev":"0-0"' in header and b'"count":50' in header


def test_a_slice_must_follow_prev() -> None:
    with pytest.raises(InvalidArgument):
        build_slice("q", "5-0", items(3, start=1))
    with pytest.raises(InvalidArgument):
        build_slice("q", "0-0", [])


DEEP = b"[" * 100_000 + b"]" * 100_000
"""JSON nested past the parsers' depth (a hostile object: orjson refuses it, and the
standard library's parser runs out of stack)."""


@pytest.mark.parametrize("damage", ["truncate", "garbage", "reorder", "miscount", "rename",
                                    "nested"])
def test_a_corrupt_slice_is_refused_by_name(damage: str) -> None:
    good = build_slice("q", "0-0", items(5))
    ref = good.meta.ref
    body = gzip.decompress(good.data).split(b"\n")
    if damage == "truncate":
        data = good.data[: len(good.data) // 2]
    elif damage == "garbage":
        data = b"not gzip at all"
    elif damage == "reorder":
        body[1], body[2] = body[2], body[1]
        data = gzip.compress(b"\n".join(body), mtime=0)
    elif damage == "miscount":
        data = gzip.compress(b"\n".join(body[:1] + body[2:]), mtime=0)
    elif damage == "nested":
        body[2] = body[2][:-2] + b',"deep":' + DEEP + b"}}"
        data = gzip.compress(b"\n".join(body), mtime=0)
    else:
        ref = build_slice("q", "0-0", items(6)).meta.ref
        data = good.data
    with pytest.raises(SliceCorrupt, match="s3://b/obj") as info:
        decode_slice(data, ref, "s3://b/obj")
    assert isinstance(info.value, ChecksumMismatch)


def test_entry_lines_round_trip() -> None:
    line = entry_line("7-3", GOOD)
    assert parse_line(line) == ("7-3", GOOD)
    with pytest.raises(ValueError):
        parse_line(b'{"id": 5}')
    with pytest.raises(ValueError, match="too deep"):
        parse_line(b'{"id":"7-3","fields":{"a":' + DEEP + b"}}")


@given(st.dictionaries(st.text(st.characters(exclude_categories=["Cs"])),
                       st.text(st.characters(exclude_categories=["Cs"])), max_size=6),
       st.text(st.characters(exclude_categories=["Cs"]), min_size=1))
def test_entry_line_is_the_standard_json_encoding(fields: dict[str, str], sid: str) -> None:
    expected = json.dumps({"id": sid, "fields": fields}, ensure_ascii=False,
                          separators=(",", ":")).encode()
    assert entry_line(sid, fields) == expected


def test_a_manifest_nested_too_deep_is_refused_as_corrupt() -> None:
    """A hostile manifest in the bucket: the restore names it, not a RecursionError."""
    data = b'{"format":"' + MANIFEST_FORMAT.encode() + b'","chain":' + DEEP + b"}"
    with pytest.raises(ManifestCorrupt, match="s3://b/q/manifest.json: unreadable"):
        Manifest.from_bytes(data, None, "s3://b/q/manifest.json")
