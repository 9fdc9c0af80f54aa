"""``rediss://`` against a real TLS endpoint, so that TLS is verified, not assumed.

The wheel's Valkey is built without TLS, so stunnel terminates TLS in front of it
with a certificate the test makes (trustme). A client with the right CA adds,
claims and completes; a client trusting another CA is refused with a clear
:class:`echomq.ConnectionFailed`. ``.ci/run`` installs stunnel: in CI (``CI=true``)
a missing binary fails this file instead of skipping it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import trustme

import echomq
from echomq.servers.process import free_port
from echomq.servers.valkey import EmbeddedValkey
from tests.support.waits import wait_until

PASSWORD = "tls-pw-Vq71x"
LONG = 60_000


def stunnel_binary() -> str:
    """The stunnel binary; without it the TLS tests fail, naming the package."""
    found = shutil.which("stunnel4") or shutil.which("stunnel")
    if found:
        return found
    pytest.fail("stunnel is not installed (Debian: apt-get install stunnel4; .ci/run does it)")


@dataclass(frozen=True)
class TlsEndpoint:
    port: int
    ca_pem: Path

    def url(self, ca_pem: Path | None = None, scheme: str = "rediss") -> str:
        query = f"ssl_ca_certs={ca_pem or self.ca_pem}&" if scheme == "rediss" else ""
        return f"{scheme}://:{PASSWORD}@127.0.0.1:{self.port}/0?{query}socket_timeout=10"


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


@pytest.fixture
def tls_endpoint(tmp_path: Path) -> Iterator[TlsEndpoint]:
    binary = stunnel_binary()
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    backend = EmbeddedValkey(tmp_path / "valkey", extra_args=["--requirepass", PASSWORD])
    backend.start()
    port = free_port()
    config = tmp_path / "stunnel.conf"
    config.write_text(
        "foreground = yes\npid =\n"
        f"output = {tmp_path / 'stunnel.log'}\n"
        f"[valkey]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{backend.port}\n"
        f"cert = {tmp_path / 'server.pem'}\n"
    )
    proxy = subprocess.Popen([binary, str(config)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: proxy.poll() is not None or _accepts(port), timeout=15)
        assert proxy.poll() is None, (tmp_path / "stunnel.log").read_text()
        yield TlsEndpoint(port, tmp_path / "ca.pem")
    finally:
        proxy.terminate()
        proxy.wait(10)
        backend.cleanup()


def test_rediss_with_the_right_ca_adds_claims_and_completes(
    tls_endpoint: TlsEndpoint, executor: str, queue: str
) -> None:
    conn = echomq.connect(tls_endpoint.url(), executor=executor)  # type: ignore[arg-type]
    try:
        assert conn.redis.connection_pool.connection_class is redis.SSLConnection
        job_id = echomq.add(conn, queue, {"over": "tls"})
        [held] = echomq.claim(conn, queue, lease_ms=LONG)
        assert held.id == job_id
        echomq.complete(conn, queue, job_id, held.token, {"ok": True})
        job = echomq.get_job(conn, queue, job_id)
        assert job is not None and job.state == "completed"
        assert PASSWORD not in repr(conn)
    finally:
        conn.close()


def test_the_tls_port_speaks_only_tls(tls_endpoint: TlsEndpoint) -> None:
    """The success above went through TLS: the same port refuses plain RESP."""
    with pytest.raises(echomq.ConnectionFailed):
        echomq.connect(tls_endpoint.url(scheme="redis"))


def test_a_wrong_ca_is_refused_with_a_clear_error(
    tls_endpoint: TlsEndpoint, tmp_path: Path
) -> None:
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    with pytest.raises(echomq.ConnectionFailed) as caught:
        echomq.connect(tls_endpoint.url(ca_pem=other))
    text = str(caught.value)
    assert "certificate verify failed" in text
    assert f"rediss://:***@127.0.0.1:{tls_endpoint.port}" in text and PASSWORD not in text
