"""The fold's C accelerator writes exactly what the Python path writes.

``echomq/archive/_fold.c`` does the fold's two per-entry loops (a page of ``XRANGE``
entries into items with their canonical lines; a slice's items into the floor's index
rows) for entries of the common shape and hands every other entry to Python. Each test
here puts the same input through both paths and compares every byte, or the error: on
generated entries (any text, stray surrogates, control characters, a field named twice,
malformed outcomes, ids and names), and on a real fold of the same stream into two floors.
"""

from __future__ import annotations

import importlib
import json
import logging
import string
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from echomq.archive import Driver, Floor, accel, declare, floor_rows, stream_read
from echomq.archive.slices import RawItem
from echomq.errors import InvalidKey
from echomq.queue.keys import MAX_NAME_LENGTH, check_name

_fold = accel.FOLD
"""The compiled module: every clean install builds it (gcc is on every machine here)."""
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
"""Any code point, lone surrogates included (what a stray byte reads as)."""
ODD_TEXT = st.sampled_from(["", "\\u", "\\\\u", "\\", '"', "\x00", "\x1f", "\x7f", "\x85",
                            "\u2028", "\udcff", "é", "\U0001f600", " ", ":", "{", "\t"])
TEXT = st.one_of(ANY_TEXT, ODD_TEXT, st.text(string.digits, min_size=1, max_size=21))
NAMES = st.one_of(st.sampled_from(["job", "outcome", "attempts", "at", "result",
                                   "created_at", "payload"]), TEXT)
VALUES = {
    "job": st.one_of(st.text(string.ascii_letters + string.digits + "-_.", min_size=1,
                             max_size=24), TEXT, st.just("x" * (MAX_NAME_LENGTH + 1)),
                     st.just("é" * 100), st.just("é" * 101)),
    "outcome": st.one_of(st.sampled_from(["completed", "cancelled", "dead"]), TEXT),
    "attempts": st.one_of(st.integers(0, 10**30).map(str), TEXT),
    "at": st.one_of(st.integers(0, 2**64 + 5).map(str), st.just("0" * 25 + "7"), TEXT),
}


@st.composite
def entries(draw: Any) -> list[Any]:
    """One raw entry as a read gives it: [id, [name, value, ...]], mostly well formed."""
    ms, seq = draw(st.integers(0, 2**64 + 1)), draw(st.integers(0, 2**64 + 1))
    sid = draw(st.one_of(st.just(f"{ms}-{seq}"), st.just(f"{ms}-{seq}"), TEXT))
    flat: list[str] = []
    if draw(st.booleans()):  # the queue's own shape, maybe with a twist
        for name in ("job", "outcome", "result", "attempts", "at", "created_at"):
            if draw(st.integers(0, 19)):
                value = draw(VALUES[name]) if name in VALUES else draw(TEXT)
                flat += [name, value]
    for _ in range(draw(st.integers(0, 3))):
        flat += [draw(NAMES), draw(TEXT)]
    if draw(st.integers(0, 9)) == 0:
        flat += [draw(NAMES)]  # an odd count: a read never gives one, but both must agree
    return [sid, flat]


def outcome_of(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001  # the error itself is what is compared
        return "raised", (type(exc), str(exc))


def test_the_accelerator_is_built_and_chosen() -> None:
    """A clean install builds it and the fold uses it (else every test here fails)."""
    assert _fold is not None and _fold.__name__ == "echomq.archive._fold"


def test_a_module_built_from_another_version_is_left_unused(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """An editable install not rebuilt since ``_fold.c`` changed: the fold runs in Python
    and says why, instead of calling the old module with arguments it does not take."""
    stale = types.ModuleType("echomq.archive._fold")
    stale.INTERFACE = accel.INTERFACE - 1  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "echomq.archive._fold", stale)
    monkeypatch.setattr(sys.modules["echomq.archive"], "_fold", stale)
    try:
        with caplog.at_level(logging.WARNING, logger="echomq.archive.accel"):
            importlib.reload(accel)
        assert accel.FOLD is None
        assert "built from another version of _fold.c" in caplog.text
    finally:
        monkeypatch.undo()
        importlib.reload(accel)
    assert accel.FOLD is _fold


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.lists(entries(), max_size=6), max_bytes=st.integers(1, 600),
       size=st.integers(0, 300), have=st.booleans())
def test_take_gives_the_items_and_the_stop_of_the_python_path(
        raw: list[Any], max_bytes: int, size: int, have: bool) -> None:
    seed: list[RawItem] = [stream_read.item_of(("0-1", []))] if have else []
    fast_items, slow_items = list(seed), list(seed)
    fast = outcome_of(lambda: _fold.take(raw, fast_items, size, max_bytes,
                                         stream_read.item_of))
    slow = outcome_of(lambda: stream_read.take_py(raw, slow_items, size, max_bytes))
    assert fast == slow
    assert fast_items == slow_items
    for (_, fields, line), (_, _, expected) in zip(fast_items, slow_items, strict=True):
        assert line == expected and type(line) is bytes
        assert list(fields) == list(json.loads(line.decode("utf-8", "surrogatepass"))["fields"])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.lists(entries(), max_size=8))
def test_rows_are_the_pairs_of_the_python_path(raw: list[Any]) -> None:
    items: list[RawItem] = []
    for entry in raw:
        made = outcome_of(lambda entry=entry: stream_read.item_of(entry))
        if made[0] == "ok":
            items.append(made[1])
    qk = b"q\x00"
    fast = outcome_of(lambda: floor_rows.index_rows(qk, items))
    slow = outcome_of(lambda: floor_rows.index_rows_py(qk, items))
    assert fast == slow


@settings(max_examples=2000, deadline=None)
@given(name=st.one_of(TEXT, VALUES["job"]))
def test_the_name_rule_is_check_names(name: str) -> None:
    try:
        check_name(name)
        expected = True
    except InvalidKey:
        expected = False
    assert _fold.name_ok(name, MAX_NAME_LENGTH) is expected


def test_a_line_is_exactly_the_json_the_python_path_writes() -> None:
    """Every control character, the quote and the backslash, text past the BMP, and a
    lone surrogate (left to Python, which writes it as an escape)."""
    text = "".join(map(chr, range(0x00, 0xa0))) + '"\\é\u2028\U0001f600'
    raw = [["1-1", ["k", text, text, "v"]], ["1-2", ["stray", "\udcff"]]]
    fast: list[RawItem] = []
    slow: list[RawItem] = []
    _fold.take(raw, fast, 0, 1 << 20, stream_read.item_of)
    stream_read.take_py(raw, slow, 0, 1 << 20)
    assert [i[2] for i in fast] == [i[2] for i in slow]
    assert fast[0][2] == json.dumps({"id": "1-1", "fields": {"k": text, text: "v"}},
                                    ensure_ascii=False, separators=(",", ":")).encode()


def test_a_huge_entry_gives_the_same_line_and_the_next_ones_too() -> None:
    """A recorded payload of many MB (with and without characters to escape), then small
    entries: the buffer it needed is given back, and every line is still exact."""
    huge = "x" * (3 << 20)
    raw = [["1-1", ["payload", huge]], ["1-2", ["payload", huge + '"\n' * 1000]],
           ["1-3", ["k", "v"]], ["1-4", ["k", "\x01"]]]
    fast: list[RawItem] = []
    slow: list[RawItem] = []
    assert _fold.take(raw, fast, 0, 1 << 30, stream_read.item_of) == \
        stream_read.take_py(raw, slow, 0, 1 << 30)
    assert fast == slow
    fast, slow = [], []
    assert _fold.take(raw[2:], fast, 0, 1 << 30, stream_read.item_of) == \
        stream_read.take_py(raw[2:], slow, 0, 1 << 30)
    assert fast == slow


def test_a_fold_writes_the_same_floor_with_and_without_it(
        rconn: Any, queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same stream, odd entries included, folded once each way: identical floors."""
    def fill(queue: str) -> None:
        declare(rconn, queue)
        stream = rconn.keys(queue).completions
        for i in range(3000):
            outcome = ("completed", "cancelled", "dead")[i % 3]
            rconn.redis.xadd(stream, {"job": f"j{i * 7919 % 3001}", "outcome": outcome,
                                      "result": f"r\n\"{i}\"\\u", "attempts": str(i % 4),
                                      "at": str(1_700_000_000_000 + i * 13 % 997)},
                             id=f"{i + 1}-0")
        odd = [{"job": "bad job", "outcome": "dead", "attempts": "1", "at": "5"},
               {"job": "j", "outcome": "lost", "attempts": "1", "at": "5"},
               {"job": "j", "outcome": "dead", "attempts": "1", "at": "9" * 25},
               {"job": "é" * 101, "outcome": "dead", "attempts": "1", "at": "5"},
               {"job": "j\x7f", "outcome": "completed", "attempts": "x", "at": "5"},
               {"job": "ctl", "outcome": "completed", "attempts": "1", "at": "5",
                "result": "\x01"}]
        for n, fields in enumerate(odd):
            rconn.redis.xadd(stream, fields, id=f"5000-{n}")
        rconn.redis.execute_command("XADD", stream, "5001-0", "job", "twice", "job",
                                    "again", "outcome", "dead", "attempts", "1", "at", "7")
        rconn.redis.execute_command("XADD", stream, "5002-0", "job", b"\xff\xfe",
                                    "outcome", "dead", "attempts", "1", "at", "7")

    def fold(queue: str) -> dict[str, list[tuple[bytes, bytes]]]:
        with Floor(tmp_path / queue) as f:
            Driver(rconn, f, slice_count=700).fold(queue)
            with f.env.begin() as txn:
                rows = {name: [(k.replace(queue.encode(), b"Q"), v)
                               for k, v in txn.cursor(db=db) if not k.startswith(b"\x00")]
                        for name, db in f.store.dbs.items() if name not in ("slices", "queues")}
            status = f.status(queue).to_dict()
            status.pop("queue")
            rows["status"] = sorted(status.items())
            return rows

    fill(f"{queue}-c")
    fill(f"{queue}-py")
    with_c = fold(f"{queue}-c")
    monkeypatch.setattr(accel, "FOLD", None)
    in_python = fold(f"{queue}-py")
    assert with_c == in_python
    assert len(with_c["entries"]) + len(with_c["quarantine"]) == 3000 + 8
    # all but the control character are quarantined, and the field named twice on one
    # server (a Cluster read keeps only its last value: archived, see docs/archive.md)
    assert len(with_c["quarantine"]) in (6, 7)
