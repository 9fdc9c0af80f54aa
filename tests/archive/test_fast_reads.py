"""The restore's fast reads decide exactly as the plain ones did.

``parse_line`` reads by orjson and ``decode_slice`` checks a slice's entries column by
column; each keeps the entry-at-a-time rules for anything unusual. Here both are held
equal to those plain rules (copied below as they were) on arbitrary input: the same result
or the same error, word for word.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from echomq.archive.entries import entry_line, parse_line
from echomq.archive.slices import SliceCorrupt, build_slice, decode_slice
from echomq.archive.stream_ids import id_key, parse_stream_id


def plain_parse_line(line: bytes) -> tuple[str, dict[str, str]]:
    """``parse_line`` as it was, by the standard library alone."""
    obj = json.loads(line)
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        raise ValueError("an entry line needs an id")
    fields = obj.get("fields")
    if not isinstance(fields, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in fields.items()
    ):
        raise ValueError("an entry line needs string fields")
    parse_stream_id(obj["id"])
    return obj["id"], fields


def plain_items(objs: list[Any], body: list[bytes], prev: str) -> list[Any]:
    """``decode_slice``'s per-entry checks as they were."""
    items = []
    previous, previous_key = prev, id_key(prev)
    for obj, line in zip(objs, body, strict=True):
        sid, fields = obj["id"], obj["fields"]
        key = id_key(sid)
        if key <= previous_key:
            raise ValueError(f"entry {sid} is out of order after {previous}")
        if fields.__class__ is not dict or not set(map(type, fields.values())) <= {str}:
            raise ValueError(f"entry {sid} has fields that are not strings")
        items.append((sid, fields, line))
        previous, previous_key = sid, key
    return items


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """What ``fn`` returns, or the type and words of what it raises."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # noqa: BLE001 - the error itself is what is compared
        return "error", (type(exc).__name__, str(exc))


texts = st.text()  # lone surrogates included: a byte that was not UTF-8 reads as one
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
u64 = st.integers(min_value=0, max_value=2**64 - 1)
stream_ids = st.one_of(
    st.tuples(u64, u64).map(lambda t: f"{t[0]}-{t[1]}"),
    st.tuples(st.integers(0, 99), st.integers(0, 9)).map(lambda t: f"{t[0]}-{t[1]}"),
    st.tuples(st.integers(0, 10**21), st.integers(0, 10**21)).map(lambda t: f"{t[0]}-{t[1]}"),
    st.integers(0, 999).map(lambda n: f"00{n}-0"),  # leading zeros
    st.sampled_from(["5", "1-", "-1", "1--2", "a-1", " 1-1", "1-1\n", "\u0661-1", ""]),
    texts,
)
field_maps = st.dictionaries(texts, texts | json_values, max_size=5)


def encode(obj: Any, style: int) -> bytes:
    """JSON bytes as the fold writes them (lone surrogates as ``\\udcXX``), ASCII-escaped,
    or with a surrogate's raw (invalid UTF-8) bytes."""
    text = json.dumps(obj, ensure_ascii=style == 1, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass" if style == 2 else "backslashreplace")


@settings(max_examples=400, deadline=None)
@given(st.one_of(
    st.builds(lambda sid, fields: {"id": sid, "fields": fields}, stream_ids | json_values,
              field_maps | json_values),
    json_values,
).flatmap(lambda obj: st.tuples(st.just(obj), st.integers(0, 2))))
@example(({"id": "1-1", "fields": {"job": "j", "x": "\udcff"}}, 0))
@example(({"id": "1-1", "fields": {"n": float("nan")}}, 0))
def test_parse_line_decides_as_the_standard_library(case: tuple[Any, int]) -> None:
    line = encode(*case)
    assert outcome(parse_line, line) == outcome(plain_parse_line, line)


@settings(deadline=None)  # what is checked is the answer; a loaded machine stalls a case
@given(st.binary(max_size=40))
@example(b'{"id":"1-1","fields":{"a":"x","a":"y"}}')  # a repeated key: the last one wins
@example(b'\xef\xbb\xbf{"id":"1-1","fields":{}}')  # a byte order mark
@example(b'{"id":"1-1","fields":{"a":"\xed\xb3\xbf"}}')  # a surrogate's raw bytes
@example(b'{"id":"1-1","fields":{"a":"\\udcff"}}')
@example(b'{"id":"18446744073709551616-0","fields":{}}')
def test_parse_line_decides_any_bytes_as_the_standard_library(line: bytes) -> None:
    assert outcome(parse_line, line) == outcome(plain_parse_line, line)


def test_parse_line_reads_what_entry_line_writes_even_bytes_that_are_not_utf8() -> None:
    fields = {"job": "j1", "outcome": "dead", "result": "caf\udce9", "at": "5"}
    assert parse_line(entry_line("7-3", fields)) == ("7-3", fields)


def slice_bytes(prev: str, entries: list[tuple[Any, Any]], style: int) -> bytes:
    """A slice object around ``entries`` as given (not necessarily valid), its header
    naming their first and last ids."""
    body = [encode({"id": sid, "fields": fields}, style) for sid, fields in entries]
    first = entries[0][0] if entries else prev
    last = entries[-1][0] if entries else prev
    head = {"format": "emq-slice/2", "queue": "q", "first": str(first), "last": str(last),
            "prev": prev, "count": len(body), "prev_digest": ""}
    text = b"\n".join([json.dumps(head).encode(), *body]) + b"\n"
    return gzip.compress(text, mtime=0)


def plain_decode(data: bytes) -> Any:
    """The entries ``decode_slice`` accepts, by the plain per-entry checks."""
    lines = gzip.decompress(data).split(b"\n")
    head, body = json.loads(lines[0]), lines[1:-1]
    try:
        objs = [json.loads(line) for line in body]
        return plain_items(objs, body, head["prev"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return SliceCorrupt.__name__, f"slice: corrupt slice object ({exc})"


def fast_decode(data: bytes) -> Any:
    try:
        return [(sid, dict(fields), line) for sid, fields, line in decode_slice(data).items]
    except SliceCorrupt as exc:
        return SliceCorrupt.__name__, str(exc)


entry_ids = st.one_of(
    st.integers(1, 40).map(lambda n: f"{n}-0"),  # near each other: order often broken
    st.integers(1, 3).map(lambda n: f"5-{n}"),
    stream_ids,
    st.integers(0, 9),
    st.tuples(st.integers(1, 40), st.integers(1, 40)).map(lambda t: f"{t[0]}-0\n{t[1]}-0"),
    st.sampled_from(["1-1,2", "[1-1]", "1-1]", "007-1"]),
)
string_fields = st.dictionaries(st.sampled_from(["job", "outcome", "at"]), texts, max_size=3)


@settings(max_examples=300, deadline=None)
@example("0-0", [("1-1\n2-2", {})], 0)  # one id that reads as two once ids are joined
@example("0-0", [("1-1", {}), ("2-1\n3-1", {})], 0)
@given(st.sampled_from(["0-0", "3-0", "18446744073709551615-18446744073709551614"]),
       st.lists(st.tuples(entry_ids, string_fields | field_maps | json_values), max_size=6),
       st.integers(0, 2))
def test_decode_slice_checks_entries_as_one_by_one(prev: str,
                                                   entries: list[tuple[Any, Any]],
                                                   style: int) -> None:
    data = slice_bytes(prev, entries, style)
    expected = plain_decode(data)
    if isinstance(expected, list) and not expected:
        expected = fast_decode(data)  # no entries: refused by the header check, not here
        assert expected[0] == SliceCorrupt.__name__
    assert fast_decode(data) == expected


def test_a_slice_of_entries_sharing_milliseconds_round_trips() -> None:
    items = []
    for n in range(1, 2001):
        fields = {"job": f"j{n}", "outcome": "completed", "result": "ok", "at": str(n)}
        items.append((f"{1700000000000 + n // 3}-{n % 3}", fields,
                      entry_line(f"{1700000000000 + n // 3}-{n % 3}", fields)))
    built = build_slice("q", "0-0", items)
    back = decode_slice(built.data, built.meta.ref)
    assert back.meta == built.meta
    assert [(s, dict(f), line) for s, f, line in back.items] == items


def test_an_entry_out_of_order_or_with_a_number_for_a_field_is_named() -> None:
    ok = {"job": "j", "outcome": "dead", "at": "1"}
    swapped = slice_bytes("0-0", [("5-0", ok), ("4-9", ok), ("6-0", ok)], 0)
    try:
        decode_slice(swapped)
    except SliceCorrupt as exc:
        assert "entry 4-9 is out of order after 5-0" in str(exc)
    else:
        raise AssertionError("a slice out of order was read")
    numbered = slice_bytes("0-0", [("5-0", ok), ("6-0", {**ok, "at": 6})], 0)
    try:
        decode_slice(numbered)
    except SliceCorrupt as exc:
        assert "entry 6-0 has fields that are not strings" in str(exc)
    else:
        raise AssertionError("a field that is a number was read")
