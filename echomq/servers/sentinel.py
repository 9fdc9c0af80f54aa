"""A local Sentinel deployment from the embedded binary: one primary, one replica and
three sentinels (quorum 2).

For the tests and for development (``python -m echomq.servers.sentinel [DIR]``). Every
process is a private child on a free loopback port that dies with its owner
(:class:`~echomq.servers.process.ServerProcess`). The sentinels judge a primary down
after ``down_after_ms`` (1 s by default, so a test's failover takes seconds) and
:attr:`LocalSentinel.url` is the ``redis+sentinel://`` URL that ``echomq.connect``
takes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import redis

from echomq.errors import ConnectionFailed
from echomq.servers.process import (
    Deployment,
    ServerProcess,
    free_port,
    log_tails,
    run_in_foreground,
)
from echomq.servers.valkey import EmbeddedValkey, answers_as, probe, valkey_binary

SERVICE = "echomq"
SENTINELS = 3
QUORUM = 2
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
READY_TIMEOUT_S = 30.0


class SentinelProcess(ServerProcess):
    """One ``valkey-server --sentinel`` watching ``service`` at ``primary``."""

    name = "valkey-sentinel"
    error = ConnectionFailed
    start_timeout_s = 15.0
    poll_s = 0.02

    def __init__(self, data_dir: Path, primary: tuple[str, int], *, service: str = SERVICE,
                 quorum: int = QUORUM, down_after_ms: int = DOWN_AFTER_MS,
                 failover_timeout_ms: int = FAILOVER_TIMEOUT_MS) -> None:
        super().__init__("127.0.0.1")
        self.data_dir = data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.host)
        self.primary = primary
        self.service = service
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms

    def where(self) -> str:
        return f"{self.host}:{self.port}"

    def _config(self) -> Path:
        """The sentinel's config file: it rewrites it as it learns (peers, epochs)."""
        host, port = self.primary
        path = self.data_dir / "sentinel.conf"
        path.write_text("\n".join([
            f"port {self.port}",
            f"bind {self.host}",
            f"dir {self.data_dir}",
            f"logfile {self.data_dir / 'sentinel.log'}",
            f"sentinel monitor {self.service} {host} {port} {self.quorum}",
            f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}",
            f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {self.service} 1",
            "",
        ]))
        return path

    def start(self) -> Self:
        if self.running():
            return self
        self._spawn([valkey_binary(), str(self._config()), "--sentinel"])
        self._log = self.data_dir / "sentinel.log"
        assert self._process is not None
        self._wait(answers_as(self._process, self.host, self.port))
        return self


class LocalSentinel(Deployment):
    """A primary, its replica and three sentinels; a context manager that returns once
    every sentinel knows the replica and the other sentinels (a failover can happen)."""

    def __init__(self, data_dir: str | Path | None = None, *, service: str = SERVICE,
                 sentinels: int = SENTINELS, quorum: int = QUORUM,
                 down_after_ms: int = DOWN_AFTER_MS,
                 failover_timeout_ms: int = FAILOVER_TIMEOUT_MS,
                 replica_via: Callable[[str, int], tuple[str, int]] | None = None) -> None:
        super().__init__(data_dir, "emq-sentinel-")
        self.service = service
        self.count = sentinels
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.replica_via = replica_via
        """Where the replica reaches the primary, given the primary's address (a test
        puts a link it can hold or cut between them); the primary itself by default.
        The sentinels point a replica that replicates from elsewhere back at the
        primary after ``failover_timeout_ms``, so a long one keeps such a link."""
        self.servers: list[EmbeddedValkey] = []
        """The data nodes: ``servers[0]`` started as the primary, ``servers[1]`` as its
        replica (a failover swaps the roles; :meth:`primary` says which is which now)."""
        self.sentinels: list[SentinelProcess] = []

    @property
    def url(self) -> str:
        """``redis+sentinel://`` naming every sentinel and the service."""
        hosts = ",".join(s.where() for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def start(self) -> Self:
        if self.servers:
            return self
        try:
            primary = EmbeddedValkey(self.data_dir / "primary")
            primary.start()
            self.servers.append(primary)
            host, port = (primary.host, primary.port)
            if self.replica_via is not None:
                host, port = self.replica_via(host, port)
            replica = EmbeddedValkey(self.data_dir / "replica",
                                     extra_args=["--replicaof", host, str(port)])
            replica.start()
            self.servers.append(replica)
            for i in range(self.count):
                sentinel = SentinelProcess(
                    self.data_dir / f"sentinel-{i}", (primary.host, primary.port),
                    service=self.service, quorum=self.quorum,
                    down_after_ms=self.down_after_ms,
                    failover_timeout_ms=self.failover_timeout_ms)
                sentinel.start()
                self.sentinels.append(sentinel)
            self.wait_ready()
        except BaseException:
            self.cleanup()
            raise
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until the replica is in sync and every sentinel sees a primary with one
        replica and the other sentinels."""
        self._poll(self._ready, timeout_s,
                   f"the sentinels in {self.data_dir} are not ready in time")

    def _ready(self) -> bool:
        running = [s for s in self.servers if s.running()]
        for sentinel in self.sentinels:
            if not sentinel.running():
                continue
            client = probe(sentinel.host, sentinel.port)
            try:
                state: Any = client.sentinel_master(self.service)
                if (state.get("flags") != "master"
                        or int(state.get("num-slaves", 0)) < len(running) - 1
                        or int(state.get("num-other-sentinels", 0)) < self.count - 1):
                    return False
            except redis.RedisError:
                return False
            finally:
                client.close()
        replica = self.replica()
        if replica is None:
            return len(running) == 1
        client = probe(replica.host, replica.port)
        try:
            return client.info("replication").get("master_link_status") == "up"
        except redis.RedisError:
            return False
        finally:
            client.close()

    def _with_role(self, role: str) -> EmbeddedValkey | None:
        for server in self.servers:
            if not server.running():
                continue
            client = probe(server.host, server.port)
            try:
                if client.info("replication").get("role") == role:
                    return server
            except redis.RedisError:
                continue
            finally:
                client.close()
        return None

    def primary(self) -> EmbeddedValkey | None:
        """The running data node that says it is the primary now."""
        return self._with_role("master")

    def replica(self) -> EmbeddedValkey | None:
        """The running data node that says it is a replica now."""
        return self._with_role("slave")

    def wait_promoted(self, server: EmbeddedValkey, timeout_s: float | None = None
                      ) -> None:
        """Until ``server`` is the primary and the sentinels name it (after a failover).

        A failover whose election splits is retried by the sentinels only after twice
        ``failover_timeout_ms``, so the default wait leaves room for two retries; when
        it still gives up, the error carries the sentinels' own account of events."""
        if timeout_s is None:
            timeout_s = max(READY_TIMEOUT_S, 6 * self.failover_timeout_ms / 1000)
        try:
            self._poll(lambda: self._names(server), timeout_s,
                       f"{server.where()} was not promoted in {timeout_s:.0f} s")
        except ConnectionFailed as exc:
            raise ConnectionFailed(f"{exc}\n{self._sentinel_events()}") from None

    def _sentinel_events(self, lines: int = 15) -> str:
        """The last ``lines`` of each sentinel's log (elections, votes, refusals)."""
        return log_tails([(f"sentinel {i} ({sentinel.where()})",
                           sentinel.data_dir / "sentinel.log")
                          for i, sentinel in enumerate(self.sentinels)], lines)

    def _names(self, server: EmbeddedValkey) -> bool:
        if self.primary() is not server:
            return False
        for sentinel in self.sentinels:
            if not sentinel.running():
                continue
            client = probe(sentinel.host, sentinel.port)
            try:
                found: Any = client.sentinel_get_master_addr_by_name(self.service)
                host, port = found
                if (host, int(port)) != (server.host, server.port):
                    return False
            except (redis.RedisError, TypeError, ValueError):
                return False
            finally:
                client.close()
        return True

    def processes(self) -> list[ServerProcess]:
        return [*self.sentinels, *self.servers]

    def _forget_processes(self) -> None:
        self.sentinels = []
        self.servers = []

    def running(self) -> bool:
        """True while any sentinel runs."""
        return any(sentinel.running() for sentinel in self.sentinels)


def main() -> None:
    """``python -m echomq.servers.sentinel [DIR]``: run a primary, a replica and three
    sentinels in the foreground until Ctrl-C or SIGTERM, then stop them."""
    local = LocalSentinel(sys.argv[1] if len(sys.argv) > 1 else None)
    run_in_foreground(local, lambda: [local.url,
                                      *(f"  data {s.where()}" for s in local.servers)])


if __name__ == "__main__":
    main()
