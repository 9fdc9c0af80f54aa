"""Issue 12: Sentinel. A primary, its replica and three sentinels from the embedded
binary; ``connect`` takes the ``redis+sentinel://`` URL; a Consumer rides a failover."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.sentinel import SentinelManagedSSLConnection

import echomq
from echomq.queue.connection import EXECUTORS
from echomq.servers.sentinel import LocalSentinel
from tests.support.consumers import run_until
from tests.support.failover import run_through_failover
from tests.support.links import Link
from tests.support.servers import memory_folder


@pytest.fixture(scope="module")
def sentinel() -> Iterator[LocalSentinel]:
    with memory_folder("emq-sentinel-") as folder, LocalSentinel(folder) as found:
        yield found


def test_the_local_sentinel_watches_one_primary_and_its_replica(
        sentinel: LocalSentinel) -> None:
    primary, replica = sentinel.primary(), sentinel.replica()
    assert primary is sentinel.servers[0] and replica is sentinel.servers[1]
    assert len(sentinel.sentinels) == 3
    for watcher in sentinel.sentinels:
        admin = redis.Redis(host=watcher.host, port=watcher.port, decode_responses=True)
        try:
            state = admin.sentinel_master("echomq")
            assert (state["ip"], int(state["port"])) == (primary.host, primary.port)
            assert state["quorum"] == 2 and state["num-other-sentinels"] == 2
            assert state["num-slaves"] == 1
        finally:
            admin.close()
    assert sentinel.url.startswith("redis+sentinel://127.0.0.1:")
    assert sentinel.url.endswith("/echomq/0")


def test_a_failover_that_does_not_come_says_what_the_sentinels_saw(
        sentinel: LocalSentinel) -> None:
    """Waiting for a promotion that never happens fails with each sentinel's log, so a
    failover that stalls in CI can be told apart from one that was merely slow."""
    replica = sentinel.replica()
    assert replica is not None
    with pytest.raises(echomq.ConnectionFailed) as failed:
        sentinel.wait_promoted(replica, timeout_s=0.3)
    message = str(failed.value)
    assert f"{replica.where()} was not promoted in 0 s" in message
    for watcher in sentinel.sentinels:
        assert f"({watcher.where()}):" in message
        last_line = (watcher.data_dir / "sentinel.log").read_text().splitlines()[-1]
        assert last_line in message


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("scheme", ["redis+sentinel", "valkey+sentinel"])
def test_connect_by_the_sentinel_url_runs_jobs(
        sentinel: LocalSentinel, executor: str, scheme: str) -> None:
    url = sentinel.url.replace("redis+sentinel", scheme)
    conn = echomq.connect(url, executor)  # type: ignore[arg-type]
    queue = f"sentinel-{uuid.uuid4().hex[:8]}"
    try:
        echomq.add_many(conn, queue, [{"n": i} for i in range(5)])
        jobs = echomq.claim(conn, queue, 30_000, 5)
        for job in jobs:
            echomq.complete(conn, queue, job.id, job.token, "ok")
        assert echomq.counts(conn, queue).completed == 5
        primary = sentinel.primary()
        assert primary is not None
        admin = redis.Redis(host=primary.host, port=primary.port, decode_responses=True)
        try:  # the writes went to the primary the sentinels name
            assert admin.zcard(conn.keys(queue).completed) == 5
        finally:
            admin.close()
    finally:
        conn.close()


@pytest.mark.parametrize("url, says", [
    ("redis+sentinel:///service", "names no sentinel host"),
    ("redis+sentinel://127.0.0.1:26379", "names no service"),
    ("redis+sentinel://127.0.0.1:26379/", "names no service"),
    ("redis+sentinel://127.0.0.1:99999/svc", "bad port"),
    ("redis+sentinel://127.0.0.1:26379/svc/zero", "db must be a number"),
    ("redis+sentinel://127.0.0.1:26379/svc?colour=blue", "unknown option"),
    ("redis+sentinel://127.0.0.1/svc?ssl_ca_certs=/ca.pem", "need rediss\\+sentinel"),
    # issue 20, item 17: ASCII digits only ("2٣" was port 23, "²" a raw ValueError)
    ("redis+sentinel://h1:2\u0663/svc", "bad port '2\u0663'"),
    ("redis+sentinel://h1:26379,h2:\u00b2/svc", "bad port '\u00b2'"),
    ("redis+sentinel://h1/svc/\u0663", "db must be a number"),
    ("redis+sentinel://h1/svc/\u00b2", "db must be a number"),
    ("redis+sentinel://h1/svc?db=\u0661", "db must be a number"),
])
def test_a_bad_sentinel_url_is_refused_before_the_wire(url: str, says: str) -> None:
    with pytest.raises(echomq.InvalidArgument, match=says):
        echomq.connect(url)


def test_passwords_never_show_in_errors_logs_or_reprs(
        sentinel: LocalSentinel, caplog: pytest.LogCaptureFixture) -> None:
    secret, sentinel_secret = "s3cr3t-data", "s3cr3t-sentinel"
    bad = f"redis+sentinel://user:{secret}@127.0.0.1:1/svc/x?sentinel_password={sentinel_secret}"
    with pytest.raises(echomq.InvalidArgument) as refused:
        echomq.connect(bad)
    assert secret not in str(refused.value) and sentinel_secret not in str(refused.value)
    # a sentinel nobody runs: the failure names the URL, redacted
    hosts = sentinel.url.partition("://")[2].partition("/")[0]
    unreachable = (f"redis+sentinel://user:{secret}@127.0.0.1:1/nosuch/0"
                   f"?sentinel_password={sentinel_secret}")
    with caplog.at_level(logging.DEBUG), pytest.raises(echomq.ConnectionFailed) as lost:
        echomq.connect(unreachable)
    assert "***" in str(lost.value)
    # a service the sentinels do not watch (they take no password: refused at AUTH or
    # not found, never with the secret in the message)
    wrong = f"redis+sentinel://{hosts}/nosuch/0?sentinel_password={sentinel_secret}"
    with pytest.raises(echomq.ConnectionFailed) as unknown:
        echomq.connect(wrong)
    conn = echomq.connect(sentinel.url.replace("://", f"://default:{secret}@", 1),
                          check=False)
    shown = [str(lost.value), str(unknown.value), repr(conn), conn.safe_url,
             repr(conn.redis), repr(conn.executor.url), caplog.text]
    conn.close()
    for text in shown:
        assert secret not in text and sentinel_secret not in text, text


@pytest.mark.slow
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_consumer_rides_a_sentinel_failover(executor: str) -> None:
    with memory_folder("emq-sentinel-") as folder, LocalSentinel(folder) as local:
        old, replica = local.primary(), local.replica()
        assert old is not None and replica is not None
        report = run_through_failover(
            local.url, f"failover-{executor}", executor,
            kill=old.kill, promoted=lambda: local.wait_promoted(replica))
    print(f"\nsentinel failover ({executor}): {report.line()}")
    assert report.processed_after_failover >= 300
    assert report.in_flight == 0  # every job the new primary has ended completed
    assert report.completed == report.added - report.lost_adds


@pytest.mark.slow
@pytest.mark.parametrize("executor, durable", [("scripts", 0), ("functions", 1)])
def test_settles_the_replica_never_saw_are_lost_and_durable_mode_counts_them(
        executor: str, durable: int) -> None:
    """A partition: the replica's link is held while the primary keeps acknowledging
    settles, then the primary dies. Those settles are lost with it (measured, not
    hoped away); in durable mode every one of them was reported as a shortfall (its
    WAIT saw no replica), so nothing acknowledged as durable is lost."""
    links: list[Link] = []

    def via(host: str, port: int) -> tuple[str, int]:
        links.append(Link((host, port)))
        return links[-1].address

    # a long failover timeout: the sentinels would repoint a replica whose upstream is
    # not the primary's address (the link) after it
    with memory_folder("emq-sentinel-") as folder, \
            LocalSentinel(folder, replica_via=via, failover_timeout_ms=60_000) as local:
        old, replica = local.primary(), local.replica()
        assert old is not None and replica is not None

        def kill() -> None:
            old.kill()
            links[0].cut()  # what the link held back dies with the primary

        report = run_through_failover(
            local.url, f"partition-{executor}", executor, kill=kill,
            promoted=lambda: local.wait_promoted(replica), partition=links[0].hold,
            durable_replicas=durable, durable_timeout_ms=100)
    print(f"\npartition then failover ({executor}, durable={durable}): {report.line()}")
    assert links[0].held_bytes > 0
    assert report.lost_acks > 0  # the primary acknowledged what its replica never got
    assert report.in_flight == 0
    assert report.completed == report.added - report.lost_adds
    if durable:
        # every loss was reported before the primary died
        assert 0 < report.lost_acks <= report.shortfalls_at_kill


def test_rediss_sentinel_speaks_tls_to_the_sentinels_and_the_primary() -> None:
    conn = echomq.connect("rediss+sentinel://127.0.0.1:1,127.0.0.1:2/svc/2"
                          "?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required", check=False)
    try:
        pool: Any = conn.redis.connection_pool
        assert pool.connection_class is SentinelManagedSSLConnection
        assert pool.connection_kwargs["db"] == 2
        assert pool.connection_kwargs["ssl_ca_certs"] == "/etc/ca.pem"
        watchers: Any = conn.redis
        for client in watchers.watchers.sentinels:
            assert client.connection_pool.connection_class is redis.SSLConnection
    finally:
        conn.close()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_primary_without_the_scripts_or_the_library_gets_them_again(
        sentinel: LocalSentinel, executor: str) -> None:
    """What a new primary that never had them looks like (one restored from a snapshot
    without its functions, say): the executors load them on NOSCRIPT / "function not
    found" and the call goes through, alone or in a settle pipeline."""
    conn = echomq.connect(sentinel.url, executor)  # type: ignore[arg-type]
    queue = f"reload-{uuid.uuid4().hex[:8]}"
    primary = sentinel.primary()
    assert primary is not None
    admin = redis.Redis(host=primary.host, port=primary.port, decode_responses=True)
    try:
        echomq.add_many(conn, queue, [{"n": i} for i in range(4)])
        admin.script_flush()
        admin.function_flush()
        [job, *_] = echomq.claim(conn, queue, 30_000, 1)  # one call: loaded, sent again
        admin.script_flush()
        admin.function_flush()
        echomq.complete(conn, queue, job.id, job.token, "ok")
        admin.script_flush()
        admin.function_flush()
        # a Consumer's settle pipeline, with the durable WAIT at its end
        run_until(conn, queue, lambda job: "ok",
                  lambda: echomq.counts(conn, queue).completed == 4, durable_replicas=1)
        if executor == "functions":
            assert [dict(zip(lib[::2], lib[1::2], strict=True))["library_name"]
                    for lib in admin.function_list()] == ["echomq"]
    finally:
        admin.close()
        conn.close()
