"""Real servers for the archive suite: SeaweedFS and moto (session-scoped), and helpers.

Every test gets a fresh bucket and a fresh queue name, so tests share the servers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from archive_helpers import Recorder, bucket_name

from echomq.archive import declare
from echomq.archive.remote import S3Remote
from echomq.archive.seaweed import MotoS3, SeaweedS3
from echomq.queue.connection import Connection, connect


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


@pytest.fixture(params=["seaweed", "moto"])
def remote(request: pytest.FixtureRequest) -> S3Remote:
    """A fresh bucket on each real S3 server in turn."""
    server = request.getfixturevalue(request.param)
    return server.remote(bucket_name(), "archive/", retries=2, backoff_s=0.01)  # type: ignore[no-any-return]


@pytest.fixture
def weed_remote(seaweed: SeaweedS3) -> S3Remote:
    return seaweed.remote(bucket_name(), "archive/", retries=2, backoff_s=0.01)


@pytest.fixture
def rconn(server_url: str) -> Iterator[Connection]:
    """One connection (the archive does not depend on the executor)."""
    connection = connect(server_url)
    yield connection
    connection.close()


@pytest.fixture
def rec(rconn: Connection, queue: str) -> Recorder:
    declare(rconn, queue)
    return Recorder(rconn, queue)


@pytest.fixture
def floor_path(tmp_path: Path) -> Path:
    return tmp_path / "floor"
