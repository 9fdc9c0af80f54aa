"""DNS rebinding: the dashboard answers only a ``Host`` that names it. Against ``emq
dashboard`` served by uvicorn on loopback (a real socket, plain HTTP requests that set
their own ``Host``), and through the test client for ``create_app(allowed_hosts=...)``."""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from echomq.cli import main
from echomq.errors import EchoMQError
from echomq.queue.connection import Connection
from echomq.web import create_app
from tests.web.served import dashboard


@pytest.fixture(scope="module")
def port(server_url: str) -> Iterator[int]:
    """``emq dashboard`` on 127.0.0.1, tokenless, also answering ``ops.example``."""
    with dashboard(server_url, "--allowed-host", "Ops.Example") as served:
        yield int(served.url.rsplit(":", 1)[1])


def status(port: int, host: str, path: str = "/") -> tuple[int, str]:
    """GET ``path`` from the dashboard with this ``Host`` header (as a rebound page's
    request carries its own name)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": host})
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def test_a_foreign_host_is_refused(port: int) -> None:
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io",
                 "localhost.evil.example", ""):
        for path in ("/", "/metrics", "/queue?queue=x", "/static/app.css"):
            code, body = status(port, host, path)
            assert code == 400, (host, path, code)
        assert "--allowed-host" in body


def test_the_bound_address_loopback_names_and_allowed_hosts_are_served(port: int) -> None:
    for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "LOCALHOST.",
                 f"[::1]:{port}", f"ops.example:{port}", "OPS.example"):
        code, body = status(port, host)
        assert code == 200 and "<h1>Queues</h1>" in body, (host, code)


def test_create_app_checks_the_host(rconn: Connection) -> None:
    plain = TestClient(create_app(rconn))  # the test client's address is "testserver"
    assert plain.get("/").status_code == 200
    assert plain.get("/", headers={"host": "evil.example"}).status_code == 400
    named = TestClient(create_app(rconn, allowed_hosts=["ops.example"]))
    assert named.get("/", headers={"host": "ops.example:8443"}).status_code == 200
    assert named.get("/", headers={"host": "evil.example"}).status_code == 400
    every = TestClient(create_app(rconn, allowed_hosts=["*"]))
    assert every.get("/", headers={"host": "evil.example"}).status_code == 200
    for bad in ("", "a b", "x/y"):
        with pytest.raises(EchoMQError, match="is not a host name"):
            create_app(rconn, allowed_hosts=[bad])


def test_a_bad_allowed_host_is_a_usage_error(server_url: str) -> None:
    done = CliRunner().invoke(main, ["--url", server_url, "dashboard",
                                     "--allowed-host", "a b"])
    assert done.exit_code == 2 and "--allowed-host" in done.output
    assert "is not a host name" in done.output
