"""A slice is read in pages of ``stream_read.PAGE`` entries, the next page asked for before
the one in hand is taken (one server; a Cluster reads page by page).

What the pipelining must never do: give other items than the plain read, leave a reply
pending on a connection it hands back to the pool (the next command there would read a
stale ``XRANGE`` reply as its own), or lose the slice when the connection drops or a page
holds bytes that are not UTF-8 (the plain loop reads on from the last item taken).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from echomq.archive import Driver, StreamGap
from echomq.archive.stream_read import PAGE, read_items
from tests.support.recorder import Recorder

pytestmark = pytest.mark.plain_only  # the pipelined read is for one server


def _fast(url: str, **pool: Any) -> redis.Redis:
    """A client like the driver's fast one, on a pool of exactly one connection, so the
    connection a read gives back is the one the next command gets."""
    client = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(
        url, max_connections=1, timeout=5, decode_responses=True, **pool))
    client.set_response_callback("XRANGE", lambda reply, **_: reply)
    return client


@pytest.fixture
def fast(plain_url: str) -> Iterator[redis.Redis]:
    client = _fast(plain_url)
    yield client
    client.close()


def _both(rec: Recorder, fast: redis.Redis, **limits: Any
          ) -> tuple[tuple[list[Any], float | None], tuple[list[Any], float | None]]:
    args = dict(count=10**6, max_bytes=1 << 40, entry_bytes=None) | limits
    piped = read_items(rec.conn.redis, rec.key, "0-0", "+", fast=fast, **args)
    plain = read_items(rec.conn.redis, rec.key, "0-0", "+", **args)
    return piped, plain


@pytest.mark.parametrize("limits", [
    {},  # every entry, the entry size learnt on the first page
    {"entry_bytes": 180.0},  # known from an earlier slice: asked ahead from the start
    {"count": 2 * PAGE + 7, "entry_bytes": 180.0},  # the count ends it mid-page
    {"max_bytes": 300_000, "entry_bytes": 180.0},  # the bytes end it mid-page
])
def test_pipelined_pages_give_the_items_of_the_plain_read(
        rec: Recorder, fast: redis.Redis, limits: dict[str, Any]) -> None:
    rec.add(3 * PAGE + 500)
    (piped, piped_size), (plain, plain_size) = _both(rec, fast, **limits)
    assert piped == plain
    assert piped_size == plain_size
    expected = rec.written_ids()[:len(plain)]
    assert [sid for sid, _, _ in piped] == expected
    if "count" in limits:
        assert len(piped) == limits["count"]
    if "max_bytes" in limits:
        assert sum(len(line) + 1 for _, _, line in piped) <= limits["max_bytes"]
        assert len(piped) < 3 * PAGE


def test_a_page_asked_ahead_but_not_needed_is_read_before_the_connection_goes_back(
        rec: Recorder, fast: redis.Redis) -> None:
    """Small entries teach a small entry size, so a page is asked ahead; large ones then
    fill the bytes on the page in hand. The connection goes back with nothing pending:
    the next command on it reads its own reply."""
    rec.add(PAGE)
    big = "x" * 10_000
    pipe = rec.conn.redis.pipeline(transaction=False)
    for n in range(3 * PAGE):
        pipe.xadd(rec.key, {"job": f"big-{n}", "outcome": "completed", "result": big,
                            "attempts": "1", "at": str(1_700_000_100_000 + n)})
    pipe.execute()
    items, _ = read_items(rec.conn.redis, rec.key, "0-0", "+", count=10**6,
                          max_bytes=2_000_000, entry_bytes=None, fast=fast)
    assert PAGE < len(items) < 2 * PAGE  # the bytes ended it on the second large page
    assert fast.execute_command("ECHO", "mine") == "mine"
    again, _ = read_items(rec.conn.redis, rec.key, "0-0", "+", count=10**6,
                          max_bytes=2_000_000, entry_bytes=None, fast=fast)
    assert again == items


class _SecondRead(redis.Connection):
    """A connection that runs the test's ``action`` on itself just before it reads the
    reply to the second ``XRANGE`` of the test (the first page in hand, the next asked
    for)."""

    xranges = 0
    action: Callable[[redis.Connection], None] | None = None

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        if args and args[0] == "XRANGE":
            type(self).xranges += 1
        super().send_command(*args, **kwargs)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        cls = type(self)
        if cls.xranges == 2 and cls.action is not None:
            action, cls.action = cls.action, None
            action(self)
        return super().read_response(*args, **kwargs)


@pytest.fixture
def second_read(plain_url: str) -> Iterator[redis.Redis]:
    """A fast client on one :class:`_SecondRead` connection; the test sets the action."""
    _SecondRead.xranges = 0
    client = _fast(plain_url, connection_class=_SecondRead)
    yield client
    _SecondRead.action = None
    client.close()


def test_a_connection_dropped_mid_slice_hands_the_rest_to_the_plain_read(
        rec: Recorder, plain_url: str, second_read: redis.Redis) -> None:
    rec.add(3 * PAGE + 500)
    killer = redis.Redis.from_url(plain_url)

    def drop(conn: redis.Connection) -> None:  # the server closes it: CLIENT KILL
        host, port = conn._sock.getsockname()[:2]  # type: ignore[union-attr]
        assert killer.client_kill_filter(addr=f"{host}:{port}") == 1

    _SecondRead.action = drop
    try:
        items, _ = read_items(rec.conn.redis, rec.key, "0-0", "+", count=10**6,
                              max_bytes=1 << 40, entry_bytes=180.0, fast=second_read)
    finally:
        killer.close()
    assert _SecondRead.action is None and _SecondRead.xranges > 2  # dropped, read on
    assert [sid for sid, _, _ in items] == rec.written_ids()
    assert second_read.execute_command("ECHO", "mine") == "mine"


def test_an_interrupt_with_a_page_asked_ahead_closes_the_connection(
        rec: Recorder, second_read: redis.Redis) -> None:
    """Ctrl-C (or any error) between asking for a page and reading it: the connection
    must not go back to the pool with that reply pending."""
    rec.add(3 * PAGE)

    def interrupt(_: redis.Connection) -> None:
        raise KeyboardInterrupt

    _SecondRead.action = interrupt
    with pytest.raises(KeyboardInterrupt):
        read_items(rec.conn.redis, rec.key, "0-0", "+", count=10**6, max_bytes=1 << 40,
                   entry_bytes=180.0, fast=second_read)
    assert second_read.execute_command("ECHO", "mine") == "mine"


def test_bytes_that_are_not_utf8_on_a_later_page_are_read_undecoded_and_quarantined(
        rec: Recorder, fast: redis.Redis, tmp_path: Path) -> None:
    rec.add(PAGE + 200)
    bad = str(rec.conn.redis.xadd(rec.key, {"job": "raw", "outcome": "completed",
                                            "result": b"\xff{", "attempts": "1",
                                            "at": "1700000200000"}))
    rec.add(PAGE)
    items, _ = read_items(rec.conn.redis, rec.key, "0-0", "+", count=10**6,
                          max_bytes=1 << 40, entry_bytes=180.0, fast=fast)
    assert len(items) == 2 * PAGE + 201
    kept = {sid: fields for sid, fields, _ in items}
    assert kept[bad]["result"] == "\udcff{"
    assert fast.execute_command("ECHO", "mine") == "mine"

    with Driver(rec.conn, tmp_path / "floor", claim_custody=True) as driver:
        report = driver.fold(rec.queue)
        quarantined = driver.floor.quarantined(rec.queue)
    assert (report.entries, report.quarantined, report.error) == (2 * PAGE + 201, 1, None)
    assert [q.stream_id for q in quarantined] == [bad]
    assert rec.conn.redis.xlen(rec.key) == 0


def test_a_trim_between_two_pages_of_a_slice_is_a_gap(
        rec: Recorder, second_read: redis.Redis, tmp_path: Path) -> None:
    """Someone else trims the stream while a slice is read page by page: the entries they
    took between two pages are a gap (nothing of the slice is committed, nothing trimmed),
    not silently missing from the floor."""
    ids = rec.add(3 * PAGE + 500)

    def trim(_: redis.Connection) -> None:  # the first page taken, the second asked
        rec.conn.redis.execute_command("XTRIM", rec.key, "MINID", "=", ids[2 * PAGE + 300])

    _SecondRead.action = trim
    with Driver(rec.conn, tmp_path / "floor", slice_count=10**4) as driver:
        driver._raw = second_read  # its reads go through the trimming connection
        with pytest.raises(StreamGap) as info:
            driver.fold(rec.queue)
        assert _SecondRead.action is None  # the trim ran mid-slice
        assert info.value.after == "0-0" and info.value.count >= 300
        assert driver.floor.status(rec.queue).entries == 0
    assert rec.conn.redis.xlen(rec.key) == len(ids) - (2 * PAGE + 300)
