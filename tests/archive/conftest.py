"""Real servers for the archive suite: SeaweedFS and moto (session-scoped), and helpers.

Every test gets a fresh bucket and a fresh queue name, so tests share the servers.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from echomq.archive import declare
from echomq.archive.remote import S3Remote
from echomq.archive.seaweed import MotoS3, SeaweedS3
from echomq.queue.connection import Connection, connect
from echomq.queue.keys import Keys

OUTCOMES = ("completed", "cancelled", "dead")


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


def bucket_name() -> str:
    return f"t-{uuid.uuid4().hex[:16]}"


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


class Recorder:
    """Writes outcome entries into a queue's stream exactly as the queue's Lua does."""

    def __init__(self, conn: Connection, queue: str) -> None:
        self.conn = conn
        self.queue = queue
        self.key = Keys(queue).completions
        self.written: list[tuple[str, dict[str, str]]] = []
        self._n = 0

    def add(self, count: int, at: int = 1_700_000_000_000) -> list[str]:
        pipe = self.conn.redis.pipeline(transaction=False)
        batch = []
        for _ in range(count):
            i = self._n
            self._n += 1
            outcome = OUTCOMES[i % 3]
            result = {"completed": json.dumps({"n": i}), "cancelled": f"reason {i}",
                      "dead": f"boom {i}"}[outcome]
            fields = {"job": f"job-{i}", "outcome": outcome, "result": result,
                      "attempts": str(1 + i % 4), "at": str(at + i), "created_at": str(at)}
            batch.append(fields)
            pipe.xadd(self.key, fields)
        ids = pipe.execute()
        self.written += list(zip(ids, batch, strict=True))
        return list(ids)

    def malformed(self, fields: dict[str, str] | None = None) -> str:
        fields = fields or {"job": "broken", "outcome": "exploded", "attempts": "x"}
        sid = self.conn.redis.xadd(self.key, fields)
        self.written.append((sid, fields))
        return str(sid)

    def stream_ids(self) -> list[str]:
        return [sid for sid, _ in self.conn.redis.xrange(self.key)]


@pytest.fixture
def rec(rconn: Connection, queue: str) -> Recorder:
    declare(rconn, queue)
    return Recorder(rconn, queue)


@pytest.fixture
def floor_path(tmp_path: Path) -> Path:
    return tmp_path / "floor"


def remote_spec(remote: S3Remote, server: Any) -> dict[str, Any]:
    """How a child process rebuilds the same remote."""
    return {"bucket": remote.bucket, "prefix": remote.prefix, "endpoint_url": server.endpoint_url,
            "region": "us-east-1", "aws_access_key_id": server.access_key,
            "aws_secret_access_key": server.secret_key}
