"""A local Valkey Cluster from the embedded binary: 3 primaries, one replica each.

For the tests (``pytest --cluster``) and for development (``python -m
echomq.servers.cluster``). Six private :class:`~echomq.servers.valkey.EmbeddedValkey`
nodes on free loopback ports (each with its own cluster bus port, named explicitly so
that ``port + 10000`` never has to be free), joined by :mod:`echomq.servers.cluster_join`
as ``valkey-cli --cluster create --cluster-replicas 1`` would, but with lost handshakes
sent again. Like every launcher's child, each node dies with its owner
(``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Self

import redis

from echomq.errors import ConnectionFailed
from echomq.servers.cluster_join import join
from echomq.servers.process import (
    Deployment,
    ServerProcess,
    free_port,
    log_tails,
    run_in_foreground,
)
from echomq.servers.valkey import LOG_FILE, EmbeddedValkey, probe

PRIMARIES = 3
REPLICAS_PER_PRIMARY = 1
NODE_TIMEOUT_MS = 2000
READY_TIMEOUT_S = 30.0


class ClusterNode(EmbeddedValkey):
    """One node: ``cluster-enabled yes``, its config file in its own folder."""

    def __init__(self, data_dir: Path, *, node_timeout_ms: int = NODE_TIMEOUT_MS) -> None:
        host = "127.0.0.1"
        self.bus_port = free_port(host)
        super().__init__(data_dir, host=host, extra_args=[
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(data_dir / "nodes.conf"),
            "--cluster-node-timeout", str(node_timeout_ms),
            "--cluster-port", str(self.bus_port),
            # a test may kill a primary; the survivors keep serving the other slots
            "--cluster-require-full-coverage", "no",
            # a replica's first sync starts at once, not after waiting 5 s for company
            "--repl-diskless-sync-delay", "0",
        ])

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class LocalCluster(Deployment):
    """Six nodes joined into one Cluster; a context manager that returns once every
    node says ``cluster_state:ok`` and knows all 16384 slots."""

    def __init__(self, data_dir: str | Path | None = None, *, primaries: int = PRIMARIES,
                 replicas: int = REPLICAS_PER_PRIMARY,
                 node_timeout_ms: int = NODE_TIMEOUT_MS) -> None:
        super().__init__(data_dir, "emq-cluster-")
        self.primaries = primaries
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        """How long a primary may be silent before its replica takes over (a failover
        takes about twice this)."""
        self.nodes: list[ClusterNode] = []

    @property
    def url(self) -> str:
        """A URL of one node: a cluster client discovers the rest from it."""
        return self.nodes[0].url

    def start(self) -> Self:
        if self.nodes:
            return self
        try:
            for i in range(self.primaries * (1 + self.replicas)):
                folder = self.data_dir / f"node-{i}"
                folder.mkdir(parents=True, exist_ok=True)
                node = ClusterNode(folder, node_timeout_ms=self.node_timeout_ms)
                node.start()
                self.nodes.append(node)
            self._create()
            self.wait_ok()
        except BaseException:
            self.cleanup()
            raise
        return self

    def _create(self) -> None:
        join(self.nodes, self.primaries, node_timeout_ms=self.node_timeout_ms,
             timeout_s=READY_TIMEOUT_S)

    def wait_ok(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until every running node says ``cluster_state:ok``, sees every slot
        assigned, and has its replicas attached."""
        try:
            self._poll(self._all_ok, timeout_s,
                       f"the cluster in {self.data_dir} is not ok in {timeout_s:.0f} s")
        except ConnectionFailed as exc:
            raise ConnectionFailed(f"{exc}\n{self._node_logs()}") from None

    def _node_logs(self, lines: int = 12) -> str:
        """The last ``lines`` of each node's log (failover elections, lost links)."""
        return log_tails([(f"node {i} ({node.address})", node.data_dir / LOG_FILE)
                          for i, node in enumerate(self.nodes)], lines)

    def _all_ok(self) -> bool:
        replicas = 0
        for node in self.nodes:
            if not node.running():
                continue
            client = probe(node.host, node.port)
            try:
                info = client.cluster("INFO")
                if info.get("cluster_state") != "ok" or int(
                        info.get("cluster_slots_ok", 0)) != 16384:
                    return False
                role = client.info("replication")
                if role.get("role") == "slave":
                    if role.get("master_link_status") != "up":
                        return False
                    replicas += 1
            except redis.RedisError:
                return False
            finally:
                client.close()
        return replicas >= sum(1 for n in self.nodes if n.running()) - self.primaries

    def primary_nodes(self) -> list[ClusterNode]:
        """The nodes that are primaries right now (a failover changes them)."""
        found = []
        for node in self.nodes:
            if not node.running():
                continue
            client = probe(node.host, node.port)
            try:
                if client.info("replication").get("role") == "master":
                    found.append(node)
            finally:
                client.close()
        return found

    def processes(self) -> list[ServerProcess]:
        return list(self.nodes)

    def _forget_processes(self) -> None:
        self.nodes = []

    def running(self) -> bool:
        """True while any node runs."""
        return any(node.running() for node in self.nodes)


def main() -> None:
    """``python -m echomq.servers.cluster [DIR]``: run a local Cluster in the foreground
    until Ctrl-C or SIGTERM, then stop it."""
    cluster = LocalCluster(sys.argv[1] if len(sys.argv) > 1 else None)
    run_in_foreground(cluster, lambda: [cluster.url, *(f"  {n.address}" for n in cluster.nodes)])


if __name__ == "__main__":
    main()
