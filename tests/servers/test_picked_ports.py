"""A server we start picks free ports, then binds them a moment later: in that moment
another process can take one (a server starting on another test worker, an outgoing
connection: both draw from the ephemeral range), and the server exits at start. A first
start picks new ports instead of failing; a restart keeps its ports; a port the caller
chose is never swapped. (Likely what once cost a whole test worker its S3 endpoint here,
81 errors at the session's SeaweedFS fixture; weed's log was gone before it was read.)"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
import redis

from echomq.errors import ConnectionFailed, LauncherError
from echomq.servers import moto, seaweed, valkey
from echomq.servers.moto import MotoS3
from echomq.servers.process import free_port
from echomq.servers.seaweed import SeaweedS3
from echomq.servers.valkey import EmbeddedValkey


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port another process holds."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def first_pick(taken: int, picks: list[int]) -> Callable[..., int]:
    """A port picker whose first pick was taken by someone else since."""
    def pick(host: str = "127.0.0.1") -> int:
        picks.append(taken if not picks else free_port(host))
        return picks[-1]
    return pick


def test_seaweed_gets_new_ports_when_one_was_taken(
        tmp_path: Path, taken: int, monkeypatch: pytest.MonkeyPatch) -> None:
    picks: list[int] = []
    monkeypatch.setattr(seaweed, "free_port", first_pick(taken, picks))  # the master's
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


def test_seaweed_fails_clearly_on_a_taken_port_the_caller_chose(tmp_path: Path, taken: int) -> None:
    with pytest.raises(LauncherError, match="exited with"):
        SeaweedS3(tmp_path / "weed", s3_port=taken).start()


def test_valkey_gets_a_new_port_when_its_port_was_taken(
        tmp_path: Path, taken: int, monkeypatch: pytest.MonkeyPatch) -> None:
    picks: list[int] = []
    monkeypatch.setattr(valkey, "free_port", first_pick(taken, picks))
    with EmbeddedValkey(tmp_path / "valkey") as server:
        assert server.port != taken and len(picks) == 2
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        server.restart()  # a restart keeps its port: the same URL answers
        assert server.port == picks[-1] and client.ping()
        client.close()


def test_valkey_fails_clearly_on_a_taken_port_the_caller_chose(tmp_path: Path,
                                                                taken: int) -> None:
    server = EmbeddedValkey(tmp_path / "valkey", port=taken)
    with pytest.raises(ConnectionFailed, match="exited with 1 at start"):
        server.start()
    assert server.port == taken


def test_moto_gets_a_new_port_when_its_port_was_taken(
        tmp_path: Path, taken: int, monkeypatch: pytest.MonkeyPatch) -> None:
    picks: list[int] = []
    monkeypatch.setattr(moto, "free_port", first_pick(taken, picks))
    with MotoS3(log_dir=tmp_path) as server:
        assert server.port != taken and len(picks) == 2
        s3 = boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1",
                          aws_access_key_id="moto", aws_secret_access_key="moto")
        s3.create_bucket(Bucket="after-a-clash")
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["after-a-clash"]
