"""The archive's fixtures: a fresh bucket on each real S3 server, and a floor's path.

The servers themselves (SeaweedFS, moto) and the stream recorder are in tests/conftest.py,
where the command-line tests reach them too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from echomq.archive.s3_remote import S3Remote
from echomq.servers.seaweed import SeaweedS3
from tests.support.archive import bucket_name, remote_on


@pytest.fixture(params=["seaweed", "moto"])
def remote(request: pytest.FixtureRequest) -> S3Remote:
    """A fresh bucket on each real S3 server in turn."""
    server = request.getfixturevalue(request.param)
    return remote_on(server, bucket_name(), "archive/", retries=2, backoff_s=0.01)


@pytest.fixture
def weed_remote(seaweed: SeaweedS3) -> S3Remote:
    return remote_on(seaweed, bucket_name(), "archive/", retries=2, backoff_s=0.01)


@pytest.fixture
def floor_path(tmp_path: Path) -> Path:
    return tmp_path / "floor"
