"""Durable settles: ``Consumer(durable_replicas=1)`` ends each settle round trip with
``WAIT``; a settle counts once a replica has it, and a shortfall is never silent."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import echomq
from echomq.queue.connection import EXECUTORS
from echomq.servers.valkey import EmbeddedValkey
from tests.support.consumers import run_until
from tests.support.links import Link
from tests.support.waits import wait_until


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedValkey,
                                                                      EmbeddedValkey]]:
    """A primary and its replica behind a slow link (50 ms a chunk): without the WAIT a
    settle is acknowledged well before the replica has it."""
    folder = tmp_path_factory.mktemp("pair")
    with EmbeddedValkey(folder / "primary") as primary:
        link = Link((primary.host, primary.port), delay_s=0.05)
        replica = EmbeddedValkey(folder / "replica", extra_args=[
            "--replicaof", "127.0.0.1", str(link.port)]).start()
        admin = redis.Redis(host=replica.host, port=replica.port, decode_responses=True)
        wait_until(lambda: admin.info("replication")["master_link_status"] == "up")
        admin.close()
        try:
            yield primary, replica
        finally:
            replica.cleanup()
            link.cut()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_durable_settle_is_on_the_replica_when_it_is_acknowledged(
        pair: tuple[EmbeddedValkey, EmbeddedValkey], executor: str, queue: str) -> None:
    primary, replica = pair
    conn = echomq.connect(primary.url, executor)  # type: ignore[arg-type]
    seen = redis.Redis(host=replica.host, port=replica.port, decode_responses=True)
    on_replica: list[str] = []

    def on_settled(job: Any, kind: str) -> None:
        # the WAIT returned before this call: the replica has applied the settle
        on_replica.append(str(seen.hget(conn.keys(queue).job(job.id), "state")))

    echomq.add_many(conn, queue, [{"n": i} for i in range(200)])
    try:
        run_until(conn, queue, lambda job: "ok", lambda: len(on_replica) == 200,
                  durable_replicas=1, durable_timeout_ms=5_000, on_settled=on_settled)
    finally:
        seen.close()
        conn.close()
    assert on_replica == ["completed"] * 200


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_durable_settle_without_a_replica_is_logged_and_counted(
        private_server: EmbeddedValkey, executor: str, queue: str,
        caplog: pytest.LogCaptureFixture) -> None:
    conn = echomq.connect(private_server.url, executor)  # type: ignore[arg-type]
    echomq.add_many(conn, queue, [{"n": i} for i in range(10)])
    consumer = echomq.Consumer(conn, queue, lambda job: "ok", durable_replicas=1,
                               durable_timeout_ms=50, poll_ms=20)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    with caplog.at_level(logging.WARNING, logger="echomq.consumer"):
        thread.start()
        try:
            wait_until(lambda: consumer.processed == 10)
        finally:
            consumer.stop()
            thread.join(10)
    conn.close()
    # the settles stand on the primary alone: done, and every one reported
    assert consumer.durable_shortfalls == 10
    assert "0 of 1 replica(s) acknowledged" in caplog.text


@pytest.mark.parametrize("value, says", [
    (-1, "durable_replicas"), (17, "at most 16"), (True, "durable_replicas")])
def test_durable_replicas_out_of_bounds_are_refused(value: Any, says: str) -> None:
    conn = echomq.connect("redis://127.0.0.1:1/0", check=False)
    with pytest.raises(echomq.InvalidArgument, match=says):
        echomq.Consumer(conn, "q", lambda job: None, durable_replicas=value)
    with pytest.raises(echomq.InvalidArgument, match="durable_timeout_ms"):
        echomq.Consumer(conn, "q", lambda job: None, durable_timeout_ms=0)
    conn.close()
