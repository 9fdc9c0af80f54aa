"""Real servers for the whole suite, started and stopped here: private Valkey processes,
and SeaweedFS and moto (S3) for the archive and the archive's commands.

Each test gets a fresh queue name instead of a FLUSHDB (and a fresh bucket), so tests
can share a server (and, with ``REDIS_URL`` set, run against an external Valkey). The
session servers start only when a test asks for them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

import echomq
from echomq.archive import declare
from echomq.archive.seaweed import MotoS3, SeaweedS3
from echomq.queue.connection import Connection, connect
from echomq.queue.embedded import EmbeddedValkey
from echomq.servers.cluster import LocalCluster
from tests.support.recorder import Recorder


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cluster", action="store_true", default=False,
                     help="run the shared-server tests against a local Valkey Cluster "
                          "(3 primaries, 1 replica each); plain_only tests and tests "
                          "that do not use the shared server are deselected")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--cluster"):
        return
    # a test that never asks for the shared server (it starts a private one, or needs
    # none) would only repeat the plain pass: left out too
    def on_cluster(item: pytest.Item) -> bool:
        return (item.get_closest_marker("plain_only") is None
                and "server_url" in getattr(item, "fixturenames", ()))

    kept = [i for i in items if on_cluster(i)]
    dropped = [i for i in items if not on_cluster(i)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def server_url(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The shared server: ``REDIS_URL`` when given, a local Cluster with ``--cluster``,
    else a private Valkey."""
    external = os.environ.get("REDIS_URL")
    if external:
        yield external
        return
    if request.config.getoption("--cluster"):
        with LocalCluster(tmp_path_factory.mktemp("cluster")) as cluster:
            yield cluster.url
        return
    server = EmbeddedValkey(tmp_path_factory.mktemp("valkey"))
    server.start()
    yield server.url
    server.cleanup()


@pytest.fixture
def private_server(tmp_path: os.PathLike[str]) -> Iterator[EmbeddedValkey]:
    """A server of the test's own, for restarts, kills and SCRIPT FLUSH."""
    server = EmbeddedValkey(tmp_path, appendonly=True)
    server.start()
    yield server
    server.cleanup()


@pytest.fixture(params=["scripts", "functions"])
def executor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def conn(server_url: str, executor: str) -> Iterator[Connection]:
    connection = echomq.connect(server_url, executor=executor)  # type: ignore[arg-type]
    yield connection
    connection.close()


@pytest.fixture
def queue() -> str:
    """A queue name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    server = SeaweedS3(tmp_path_factory.mktemp("seaweed")).start()
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    server = MotoS3(log_dir=tmp_path_factory.mktemp("moto")).start()
    yield server
    server.cleanup()


@pytest.fixture
def rconn(server_url: str) -> Iterator[Connection]:
    """One connection (the archive does not depend on the executor)."""
    connection = connect(server_url)
    yield connection
    connection.close()


@pytest.fixture
def rec(rconn: Connection, queue: str) -> Recorder:
    """A declared queue whose stream the test fills with outcome entries."""
    declare(rconn, queue)
    return Recorder(rconn, queue)
