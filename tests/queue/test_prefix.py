"""The key prefix: every key the library writes starts with it, and two prefixes on one
server are two deployments that never see each other's jobs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import echomq
from echomq.archive import Driver, declare, is_declared
from echomq.queue.connection import Connection, connect
from echomq.queue.keys import Keys


@pytest.fixture
def tenants(server_url: str, executor: str) -> Iterator[tuple[Connection, Connection]]:
    a = connect(server_url, executor, prefix="tenant-a")  # type: ignore[arg-type]
    b = connect(server_url, executor, prefix="tenant-b")  # type: ignore[arg-type]
    yield a, b
    a.close()
    b.close()


def _keys_of(conn: Connection, queue: str) -> list[str]:
    return sorted(conn.redis.scan_iter(match=f"*{{{queue}}}*", count=1000))


@pytest.mark.parametrize("bad", ["", "a{b", "a}b", "has space", ":lead", "trail:", "a::b",
                                 "x" * 65, "new\nline", 7])
def test_a_bad_prefix_is_refused_before_the_wire(bad: object) -> None:
    with pytest.raises(echomq.InvalidKey):
        Keys("q", bad)  # type: ignore[arg-type]
    with pytest.raises(echomq.InvalidKey):
        connect("redis://127.0.0.1:1", prefix=bad, check=False)  # type: ignore[arg-type]


def test_every_key_of_a_queue_starts_with_the_prefix(
    tenants: tuple[Connection, Connection], queue: str
) -> None:
    a, _ = tenants
    declare(a, queue)
    echomq.add(a, queue, {"n": 1}, job_id="one")
    echomq.add(a, queue, {"n": 2}, job_id="later", delay_ms=60_000)
    held = echomq.claim(a, queue, lease_ms=30_000)[0]
    echomq.extend_lock(a, queue, held.id, held.token, 30_000)
    echomq.complete(a, queue, held.id, held.token, {"ok": True})
    echomq.stalled_check(a, queue)
    written = _keys_of(a, queue)
    assert written and all(k.startswith(f"tenant-a:{{{queue}}}:") for k in written)
    assert a.redis.sismember("tenant-a:declared", queue)
    assert not a.redis.exists(f"emq:{{{queue}}}:meta")


def test_two_prefixes_never_see_each_others_jobs(
    tenants: tuple[Connection, Connection], queue: str
) -> None:
    a, b = tenants
    echomq.add(a, queue, {"tenant": "a"}, job_id="same-id")
    assert echomq.get_job(b, queue, "same-id") is None
    assert echomq.claim(b, queue, lease_ms=30_000) == []
    echomq.add(b, queue, {"tenant": "b"}, job_id="same-id")
    held_b = echomq.claim(b, queue, lease_ms=30_000)
    assert [j.payload for j in held_b] == [{"tenant": "b"}]
    assert echomq.counts(a, queue).pending == 1
    assert echomq.counts(b, queue).active == 1
    held_a = echomq.claim(a, queue, lease_ms=30_000)
    assert [j.payload for j in held_a] == [{"tenant": "a"}]


def test_declarations_and_the_archive_lease_stay_under_their_prefix(
    tenants: tuple[Connection, Connection], queue: str, tmp_path: Path
) -> None:
    a, b = tenants
    declare(a, queue)
    assert is_declared(a, queue) and not is_declared(b, queue)
    echomq.add(a, queue, {"n": 1})
    held = echomq.claim(a, queue, lease_ms=30_000)[0]
    echomq.complete(a, queue, held.id, held.token, "done")
    mine, theirs = Driver(a, tmp_path / "floor"), Driver(b, tmp_path / "floor-b")
    try:
        assert mine.fold_declared()[queue].entries == 1
        assert queue not in theirs.fold_declared()  # tenant b declared nothing
    finally:
        mine.close()
        theirs.close()
    written = _keys_of(a, queue)
    assert all(k.startswith("tenant-a:") for k in written)


def test_the_command_line_takes_a_prefix(server_url: str, queue: str) -> None:
    from click.testing import CliRunner

    from echomq.cli import main

    runner = CliRunner()
    result = runner.invoke(main, ["--url", server_url, "--prefix", "cli-tenant", "enqueue",
                                  "-q", queue, '{"n": 1}'])
    assert result.exit_code == 0, result.output
    conn = connect(server_url, prefix="cli-tenant")
    try:
        assert echomq.counts(conn, queue).pending == 1
    finally:
        conn.close()
    default = connect(server_url)
    try:
        assert echomq.counts(default, queue).pending == 0
    finally:
        default.close()
