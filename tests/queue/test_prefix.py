"""The key prefix: every key the library writes starts with it, and two prefixes on one
server are two deployments that never see each other's jobs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

import echomq
from echomq.archive import Driver, declare, is_declared
from echomq.cli import main
from echomq.queue.connection import Connection, connect
from echomq.queue.keys import Keys
from echomq.servers.valkey import EmbeddedValkey
from echomq.worker import Consumer
from tests.support.waits import wait_until


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


README_ACL = ("on >{password} resetkeys ~{prefix}:* resetchannels &{prefix}:* "
              "+@all -@dangerous +info")
"""The ACL for one tenant of docs/operating.md (``ACL SETUSER tenant-a ...``): its keys, its
channels, no dangerous command but INFO (the functions library reads the server's version)."""


@pytest.mark.parametrize("nested", ["tenant-a:eu", "tenant-a:eu:west"])
def test_a_nested_prefix_is_refused(nested: str) -> None:
    """Issue 20, item 17: ``tenant-a:eu``'s keys matched ``tenant-a``'s ACL ``~tenant-a:*``."""
    with pytest.raises(echomq.InvalidKey, match="must not nest"):
        connect("redis://127.0.0.1:1", prefix=nested, check=False)
    with pytest.raises(echomq.InvalidKey, match="must not nest"):
        Keys("q", nested)
    done = CliRunner().invoke(main, ["--url", "redis://127.0.0.1:1/0", "--prefix", nested,
                                     "status"])
    assert done.exit_code == 1 and "must not nest" in done.output, done.output


def _worked_off(conn: Connection, queue: str) -> list[str]:
    """What a Consumer on ``queue`` ran before it found nothing more to do."""
    done: list[str] = []
    consumer = Consumer(conn, queue, lambda job: done.append(job.id), poll_ms=50)
    runner = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    runner.start()
    try:
        wait_until(lambda: bool(done), timeout=20)
    finally:
        consumer.stop()
        runner.join(20)
    return done


def test_the_readme_acl_holds_one_tenant_and_nothing_else(private_server: EmbeddedValkey) -> None:
    """A real ACL user per tenant, as docs/operating.md sets them up: each runs jobs on both
    executors under its own prefix, and cannot read or write another tenant's keys."""
    admin = redis.Redis(host=private_server.host, port=private_server.port,
                        decode_responses=True)
    where = f"{private_server.host}:{private_server.port}/0"
    for tenant in ("tenant-a", "tenant-b"):
        admin.execute_command("ACL", "SETUSER", tenant, *README_ACL.format(
            password=f"pw-{tenant}", prefix=tenant).split())
    url_a = f"redis://tenant-a:pw-tenant-a@{where}"
    b = connect(f"redis://tenant-b:pw-tenant-b@{where}", prefix="tenant-b")
    echomq.add(b, "billing", {"secret": "b"}, job_id="invoice-42")
    for executor in ("scripts", "functions"):
        a = connect(url_a, executor, prefix="tenant-a")  # type: ignore[arg-type]
        try:
            declare(a, "billing")
            echomq.add(a, "billing", {"n": executor}, job_id=executor)
            assert _worked_off(a, "billing") == [executor]
            assert echomq.queues(a) == ["billing"]
        finally:
            a.close()
    # tenant-a, through the library under tenant-b's prefix or by hand: refused
    stolen = connect(url_a, prefix="tenant-b")
    raw = redis.Redis.from_url(url_a, decode_responses=True)
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            echomq.get_job(stolen, "billing", "invoice-42")
        with pytest.raises(redis.exceptions.NoPermissionError):
            echomq.add(stolen, "billing", {"n": "forged"})
        with pytest.raises(redis.exceptions.NoPermissionError):
            raw.hgetall(b.keys("billing").job("invoice-42"))
        with pytest.raises(redis.exceptions.NoPermissionError):
            raw.flushall()
    finally:
        stolen.close()
        raw.close()
    assert echomq.counts(b, "billing").pending == 1
    assert echomq.get_job(b, "billing", "invoice-42").payload == {"secret": "b"}  # type: ignore[union-attr]
    b.close()
    admin.close()
