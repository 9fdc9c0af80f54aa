"""Real servers for the suite: private Valkey processes, started and stopped here.

Each test gets a fresh queue name instead of a FLUSHDB, so tests can share a
server (and, with ``REDIS_URL`` set, run against an external one).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

import echomq
from echomq.queue.connection import Connection
from echomq.queue.embedded import EmbeddedValkey


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The shared server: ``REDIS_URL`` when given, else a private Valkey."""
    external = os.environ.get("REDIS_URL")
    if external:
        yield external
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
