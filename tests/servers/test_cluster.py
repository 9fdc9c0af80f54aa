"""Issue 12: a local Valkey Cluster from the embedded binary, and EchoMQ spread over it.

One cluster for the module (it takes a few seconds to form); the queues of each test
are fresh names, so tests share it as the suite shares its one server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import echomq
from echomq.archive import Driver, declare
from echomq.servers.cluster import LocalCluster
from tests.support.servers import memory_folder
from tests.support.spread import spread_queues
from tests.support.waits import wait_until


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with memory_folder("emq-cluster-") as folder, LocalCluster(folder) as found:
        yield found


def test_the_local_cluster_has_three_primaries_with_one_replica_each(
        cluster: LocalCluster) -> None:
    primaries = cluster.primary_nodes()
    assert len(primaries) == 3
    owned = 0
    for node in primaries:
        admin = redis.Redis(host=node.host, port=node.port, decode_responses=True)
        try:
            assert admin.cluster("INFO")["cluster_state"] == "ok"
            assert admin.info("replication")["connected_slaves"] == 1
            me = admin.cluster("MYID")
            owned += sum(int(n["slots"][-1][1]) - int(n["slots"][0][0]) + 1
                         for n in admin.cluster("NODES").values() if n["node_id"] == me)
        finally:
            admin.close()
    assert owned == 16384  # the primaries share every slot


def test_connect_finds_the_cluster_and_can_be_told_not_to(cluster: LocalCluster) -> None:
    found = echomq.connect(cluster.url)
    plain = echomq.connect(cluster.url, cluster=False)
    try:
        assert found.cluster and not plain.cluster
        assert isinstance(found.redis, redis.cluster.RedisCluster)
        assert not isinstance(plain.redis, redis.cluster.RedisCluster)
    finally:
        found.close()
        plain.close()


@pytest.mark.parametrize("executor", ["scripts", "functions"])
def test_the_functions_library_is_on_every_primary(
        cluster: LocalCluster, executor: str) -> None:
    conn = echomq.connect(cluster.url, executor=executor)  # type: ignore[arg-type]
    try:
        queues = spread_queues(conn, 6)
        for name in queues:
            echomq.add(conn, name, {"n": 1})
            [job] = echomq.claim(conn, name, 30_000)
            echomq.complete(conn, name, job.id, job.token, "ok")
    finally:
        conn.close()
    if executor == "functions":
        for node in cluster.primary_nodes():
            admin = redis.Redis(host=node.host, port=node.port, decode_responses=True)
            try:
                libraries = [dict(zip(lib[::2], lib[1::2], strict=True))["library_name"]
                             for lib in admin.function_list()]
                assert libraries == ["echomq"]
            finally:
                admin.close()


def test_many_queues_over_three_primaries_with_consumers_and_a_fold(
        cluster: LocalCluster, tmp_path: Path) -> None:
    conn = echomq.connect(cluster.url)
    admin: Any = conn.redis
    queues = spread_queues(conn, 12)
    # what the nodes say: each queue's slot (CLUSTER KEYSLOT) is served by its node
    slots = {q: admin.cluster_keyslot(conn.keys(q).meta) for q in queues}
    owners = {q: admin.nodes_manager.get_node_from_slot(slots[q]).name for q in queues}
    assert len(set(owners.values())) == 3
    for q in queues:
        declare(conn, q)
        echomq.add_many(conn, q, [{"n": i} for i in range(20)])
    done: dict[str, int] = {}
    lock = threading.Lock()

    def handler_for(q: str) -> Any:
        def handle(job: Any) -> str:
            with lock:
                done[q] = done.get(q, 0) + 1
            return "ok"
        return handle

    consumers = [echomq.Consumer(echomq.connect(cluster.url), q, handler_for(q),
                                 record=True, concurrency=2, poll_ms=100)
                 for q in queues]
    threads = [threading.Thread(target=c.run, kwargs={"install_signals": False}, daemon=True)
               for c in consumers]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: sum(done.values()) == 20 * len(queues), timeout=60)
        # jobs added while the Consumers wait are woken by the queue's event (pub/sub)
        for q in queues:
            echomq.add(conn, q, {"late": True})
        wait_until(lambda: sum(done.values()) == 21 * len(queues), timeout=30)
    finally:
        for c in consumers:
            c.stop()
        for t in threads:
            t.join(timeout=10)
        for c in consumers:
            c.conn.close()
    assert done == {q: 21 for q in queues}
    driver = Driver(conn, tmp_path / "floor")
    try:
        reports = driver.fold_declared()
    finally:
        driver.close()
    for q in queues:
        assert reports[q].entries == 21, reports[q]
        assert echomq.counts(conn, q).completed == 21
    conn.close()
