"""A private SeaweedFS picks its ports free, then ``weed`` binds them a moment later: in
that moment another process can take one (a server starting on another test worker, an
outgoing connection: both draw from the ephemeral range). ``weed`` then exits at start;
a first start picks new ports instead of failing. (Likely what once cost a whole test
worker its S3 endpoint here, 81 errors at the session's SeaweedFS fixture; weed's log was
gone before it could be read.)"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from echomq.errors import LauncherError
from echomq.servers import seaweed
from echomq.servers.process import free_port
from echomq.servers.seaweed import SeaweedS3


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port another process holds."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_a_port_taken_between_pick_and_bind_gets_new_ports(
        tmp_path: Path, taken: int, monkeypatch: pytest.MonkeyPatch) -> None:
    picks: list[int] = []

    def first_pick_taken(host: str = "127.0.0.1") -> int:
        picks.append(taken if not picks else free_port(host))  # the master's port
        return picks[-1]

    monkeypatch.setattr(seaweed, "free_port", first_pick_taken)
    with SeaweedS3(tmp_path / "weed") as server:
        assert taken not in server.ports.values()
        s3 = boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1",
                          aws_access_key_id=server.access_key,
                          aws_secret_access_key=server.secret_key)
        s3.create_bucket(Bucket="after-a-clash")
        s3.put_object(Bucket="after-a-clash", Key="probe", Body=b"kept")
        ports = dict(server.ports)
        server.restart()  # a restart keeps its ports
        assert server.ports == ports
        assert s3.get_object(Bucket="after-a-clash", Key="probe")["Body"].read() == b"kept"
    assert len(picks) > len(server.ports)  # a second set was picked


def test_a_taken_port_the_caller_chose_fails_clearly(tmp_path: Path, taken: int) -> None:
    with pytest.raises(LauncherError, match="exited with"):
        SeaweedS3(tmp_path / "weed", s3_port=taken).start()
