"""The local Cluster's join survives a node that is silent past its node timeout while
the others meet it: their handshakes with it are dropped and never retried by the
server, so a join that sent each MEET once (as ``valkey-cli --cluster create`` does)
waits forever. This one meets it again."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from echomq.servers.cluster import ClusterNode, LocalCluster
from echomq.servers.cluster_join import meet_all, prepare
from echomq.servers.valkey import probe

NODE_TIMEOUT_MS = 1000


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    started: list[ClusterNode] = []
    try:
        for i in range(6):
            (tmp_path / f"n{i}").mkdir()
            node = ClusterNode(tmp_path / f"n{i}", node_timeout_ms=NODE_TIMEOUT_MS)
            node.start()
            started.append(node)
        yield started
    finally:
        for node in started:
            node.cleanup()


@pytest.mark.slow
def test_a_node_silent_through_the_handshakes_still_joins(
        nodes: list[ClusterNode], tmp_path: Path) -> None:
    ids = prepare(nodes, 3)
    silent = nodes[5]
    assert silent.pid is not None
    os.kill(silent.pid, signal.SIGSTOP)  # frozen: it answers no handshake in time
    waking = threading.Timer(3 * NODE_TIMEOUT_MS / 1000, os.kill,
                             (silent.pid, signal.SIGCONT))
    waking.start()
    try:
        meet_all(nodes, ids, resend_s=NODE_TIMEOUT_MS / 1000,
                 deadline=time.monotonic() + 30)
    finally:
        waking.join()
        os.kill(silent.pid, signal.SIGCONT)
    for i, node in enumerate(nodes[3:]):
        node_client = probe(node.host, node.port)
        node_client.execute_command("CLUSTER", "REPLICATE", ids[i])
        node_client.close()
    cluster = LocalCluster(tmp_path / "unused")
    cluster.nodes = nodes
    cluster.wait_ok()
    assert len(cluster.primary_nodes()) == 3
    cluster.nodes = []  # the fixture stops them
