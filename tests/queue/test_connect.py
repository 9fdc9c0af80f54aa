"""Connecting: URLs, unix sockets, the executor choice and the embedded default."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import echomq
from echomq.servers.process import pid_alive
from echomq.servers.shared import SharedValkey
from echomq.servers.valkey import EmbeddedValkey
from tests.support.servers import closed_url

LONG = 60_000


def test_a_closed_port_fails_naming_the_url() -> None:
    url = closed_url()
    with pytest.raises(echomq.ConnectionFailed) as caught:
        echomq.connect(url)
    assert url in str(caught.value)
    assert isinstance(caught.value, ConnectionError)  # also catchable as the builtin


def test_a_malformed_url_fails_naming_it() -> None:
    with pytest.raises(echomq.ConnectionFailed, match="ftp://nowhere"):
        echomq.connect("ftp://nowhere")


@pytest.mark.parametrize("tail, says", [
    ("/\u0663", "the db in the path must be a number"),  # redis-py: db 3
    ("/\u00b2", "the db in the path must be a number"),  # redis-py: db 0, silently
    ("/0?db=\u0663", "db must be a number"),
    ("/0?socket_timeout=\u0661", "socket_timeout must be a number"),
])
def test_a_number_in_the_url_is_ascii_digits(tail: str, says: str) -> None:
    """Issue 20, item 17: the db and every numeric option of a URL are the digits they
    look like, or the URL is refused in one line (never another db, silently)."""
    url = closed_url().removesuffix("/0") + tail
    with pytest.raises(echomq.ConnectionFailed, match=says):
        echomq.connect(url)


def test_without_the_check_the_first_verb_fails_instead() -> None:
    conn = echomq.connect(closed_url(), check=False)
    try:
        with pytest.raises(echomq.ConnectionFailed):
            echomq.add(conn, "q", {"n": 1})
    finally:
        conn.close()


@pytest.mark.parametrize("name", ["lua", "", "Scripts", None, "function"])
def test_an_unknown_executor_is_refused(server_url: str, name: object) -> None:
    with pytest.raises(echomq.InvalidArgument, match="executor"):
        echomq.connect(server_url, executor=name)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_a_bad_payload_limit_is_refused(server_url: str, limit: object) -> None:
    with pytest.raises(echomq.InvalidArgument, match="payload_limit"):
        echomq.connect(server_url, payload_limit=limit)  # type: ignore[arg-type]


def test_the_executor_is_the_connections_choice(server_url: str, queue: str) -> None:
    scripts = echomq.connect(server_url)
    try:
        assert scripts.executor_name == "scripts" and scripts.executor.name == "scripts"
        functions = scripts.with_executor("functions")
        assert functions.executor.name == "functions" and functions.url == scripts.url
        job_id = echomq.add(functions, queue, {"n": 1})
        [held] = echomq.claim(functions, queue, lease_ms=LONG)
        job = echomq.get_job(scripts, queue, job_id)
        assert job is not None and job.lease_epoch is not None  # claimed through FCALL
    finally:
        scripts.close()


@pytest.fixture
def unix_server() -> Iterator[tuple[EmbeddedValkey, str]]:
    folder = Path(tempfile.mkdtemp(prefix="emq-"))  # short: a socket path has ~100 bytes
    socket_path = folder / "v.sock"
    server = EmbeddedValkey(
        folder, extra_args=["--unixsocket", str(socket_path), "--unixsocketperm", "700"]
    )
    server.start()
    yield server, str(socket_path)
    server.cleanup()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("executor", ["scripts", "functions"])
def test_a_unix_socket_url_works(
    unix_server: tuple[EmbeddedValkey, str], executor: str, queue: str
) -> None:
    server, socket_path = unix_server
    conn = echomq.connect(f"unix://{socket_path}", executor=executor)  # type: ignore[arg-type]
    try:
        job_id = echomq.add(conn, queue, {"via": "unix"})
        [held] = echomq.claim(conn, queue, lease_ms=LONG)
        echomq.complete(conn, queue, job_id, held.token, "ok")
        # the same server over TCP sees what the socket wrote
        tcp = echomq.connect(server.url)
        job = echomq.get_job(tcp, queue, job_id)
        tcp.close()
        assert job is not None and (job.state, job.payload) == ("completed", {"via": "unix"})
    finally:
        conn.close()


def test_the_substrate_connects_to_a_resolved_url_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the facade (``echomq.connect()``) and the CLI find the folder's shared server;
    the substrate's ``connect`` takes the resolved URL and never starts one."""
    from echomq.queue.connection import connect

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EMQ_DATA_DIR", str(tmp_path / "embedded"))
    with pytest.raises(echomq.InvalidArgument, match="connect needs a URL"):
        connect(None)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_bad_prefix_or_executor_without_a_url_starts_no_server(tmp_path: Path) -> None:
    data_dir = tmp_path / "embedded"
    with pytest.raises(echomq.InvalidKey, match="prefix"):
        echomq.connect(data_dir=data_dir, prefix="a:b")
    with pytest.raises(echomq.InvalidArgument):
        echomq.connect(data_dir=data_dir, executor="lua")  # type: ignore[arg-type]
    assert not data_dir.exists()


def test_connect_without_a_url_shares_the_folders_one_persistent_server(
    tmp_path: Path, queue: str
) -> None:
    data_dir = tmp_path / "embedded"
    first = echomq.connect(data_dir=data_dir)
    try:
        second = echomq.connect(data_dir=data_dir, executor="functions")
        assert second.url == first.url
        assert first.redis.info("server")["run_id"] == second.redis.info("server")["run_id"]
        job_id = echomq.add(first, queue, {"n": 1})
        [held] = echomq.claim(second, queue, lease_ms=LONG)
        assert held.id == job_id
        second.close()
        shared = SharedValkey(data_dir)
        info = shared.find()
        assert info is not None and info.url == first.url and info.pid != os.getpid()
        assert (data_dir / "valkey.log").exists()  # its data lives where it was asked to
        assert shared.stop() == info and not pid_alive(info.pid)
        with pytest.raises((echomq.ConnectionFailed, redis.ConnectionError)):
            first.redis.ping()
        # the next connect starts it again, and the AOF kept the claimed job
        third = echomq.connect(data_dir=data_dir)
        job = echomq.get_job(third, queue, job_id)
        assert job is not None and job.state == "active"
        third.close()
    finally:
        first.close()
        SharedValkey(data_dir).stop()
