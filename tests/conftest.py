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
from echomq.queue.connection import Connection, connect
from echomq.servers.cluster import LocalCluster
from echomq.servers.moto import MotoS3
from echomq.servers.seaweed import SeaweedS3
from echomq.servers.valkey import EmbeddedValkey
from tests.support.recorder import Recorder
from tests.support.servers import memory_folder

BOTH_PASSES = ("queue", "jobs", "worker", "app", "aio", "coordination", "archive")
"""The folders of ``tests/`` whose shared-server tests run twice, on one server and on a
local Cluster (ids ``[plain...]`` and ``[cluster...]``): the substrate, the lifecycle,
the Consumer, the asyncio verbs, rate limits, deduplication and flows, and the archive."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cluster", action="store_true", default=False,
                     help="run the shared-server tests against a local Valkey Cluster only "
                          "(3 primaries, 1 replica each); plain_only tests and tests "
                          "that do not use the shared server are deselected")


def server_kinds(config: pytest.Config, item: pytest.Function | pytest.Metafunc
                 ) -> list[str]:
    """Which servers a test that uses ``server_url`` runs on: the Cluster alone with
    ``--cluster``, both in the four folders of :data:`BOTH_PASSES` (not a ``plain_only``
    test), else one plain server."""
    definition = item.definition if isinstance(item, pytest.Metafunc) else item
    if definition.get_closest_marker("plain_only") is not None:
        return ["plain"]
    if config.getoption("--cluster"):
        return ["cluster"]
    parts = definition.path.relative_to(config.rootpath).parts
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in BOTH_PASSES:
        return ["plain", "cluster"]
    return ["plain"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "server_url" in metafunc.fixturenames:
        kinds = server_kinds(metafunc.config, metafunc)
        if kinds != ["plain"]:
            metafunc.parametrize("server_url", kinds, indirect=True, scope="session")


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
def plain_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The shared plain server: ``REDIS_URL`` when given, else a private Valkey."""
    external = os.environ.get("REDIS_URL")
    if external:
        yield external
        return
    server = EmbeddedValkey(tmp_path_factory.mktemp("valkey"))
    server.start()
    yield server.url
    server.cleanup()


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    """The shared local Cluster (3 primaries, 1 replica each), started on first use."""
    with memory_folder("emq-cluster-") as folder, LocalCluster(folder) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def server_url(request: pytest.FixtureRequest) -> str:
    """The shared server of this test: the plain one or the local Cluster's URL (see
    :func:`server_kinds`). Both stay up for the session once started."""
    kind = getattr(request, "param", "cluster" if request.config.getoption("--cluster")
                   else "plain")
    if kind == "cluster":
        return str(request.getfixturevalue("local_cluster").url)
    return str(request.getfixturevalue("plain_url"))


@pytest.fixture
def private_server() -> Iterator[EmbeddedValkey]:
    """A server of the test's own, for restarts, kills and SCRIPT FLUSH. It fsyncs every
    write (``appendfsync always``): its folder is on tmpfs, off the disk the suite keeps
    busy (see :func:`memory_folder`)."""
    with memory_folder("emq-private-") as folder:
        server = EmbeddedValkey(folder, appendonly=True)
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
