"""A password in a URL never reaches a message, a log line or a repr (issue 8, item 12).

Against a real Valkey started with ``requirepass``; the Consumer's reconnect WARNING
is captured from the real logger while the server is away.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import echomq
from echomq.queue.connection import redact_url
from echomq.servers.valkey import EmbeddedValkey
from echomq.worker.consumer import Consumer
from tests.support import ROOT
from tests.support.waits import wait_until

PASSWORD = "hunter2-Zq8xw"
WRONG = "letmein-Kx3vb"


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[EmbeddedValkey]:
    server = EmbeddedValkey(tmp_path, appendonly=True, extra_args=["--requirepass", PASSWORD])
    server.start()
    yield server
    server.cleanup()


def _url(server: EmbeddedValkey, secret: str, form: str) -> str:
    where = f"{server.host}:{server.port}/0"
    return {
        "userinfo": f"redis://:{secret}@{where}",
        "user": f"redis://default:{secret}@{where}",
        "query": f"redis://{where}?password={secret}",
    }[form]


@pytest.mark.parametrize("form", ["userinfo", "user", "query"])
def test_a_wrong_password_fails_without_showing_it(auth_server: EmbeddedValkey, form: str) -> None:
    with pytest.raises(echomq.ConnectionFailed) as caught:
        echomq.connect(_url(auth_server, WRONG, form))
    text = str(caught.value)
    assert WRONG not in text and "***" in text
    assert f"127.0.0.1:{auth_server.port}" in text  # still says where


@pytest.mark.parametrize("form", ["userinfo", "user", "query"])
def test_the_repr_of_a_connection_hides_its_password(
    auth_server: EmbeddedValkey, form: str, queue: str
) -> None:
    conn = echomq.connect(_url(auth_server, PASSWORD, form))
    try:
        echomq.add(conn, queue, {"n": 1})  # the right password works
        for shown in (repr(conn), str(conn), conn.safe_url, repr(conn.with_executor("functions"))):
            assert PASSWORD not in shown and "***" in shown
    finally:
        conn.close()


def test_a_verb_that_loses_the_server_does_not_show_the_password(
    auth_server: EmbeddedValkey, executor: str, queue: str
) -> None:
    conn = echomq.connect(_url(auth_server, PASSWORD, "userinfo"), executor=executor)  # type: ignore[arg-type]
    try:
        echomq.add(conn, queue, {"n": 1})
        auth_server.stop()
        with pytest.raises(echomq.ConnectionFailed) as caught:
            echomq.add(conn, queue, {"n": 2})
        assert "lost the server at redis://:***@" in str(caught.value)
        assert PASSWORD not in str(caught.value)
    finally:
        conn.close()


def test_a_password_server_is_started_only_once_its_data_is_loaded(
        auth_server: EmbeddedValkey) -> None:
    """The readiness probe used to take the server's NOAUTH for an answer, which it gives
    before it says it is still loading: a restart with a large AOF returned early and the
    first command failed with LOADING (seen once in CI)."""
    client = redis.Redis(host=auth_server.host, port=auth_server.port, password=PASSWORD,
                         retry=Retry(NoBackoff(), 0))  # LOADING is not retried away
    pipe = client.pipeline(transaction=False)
    for n in range(1_000_000):
        pipe.set(f"k{n}", "v" * 40)
    pipe.execute()
    auth_server.stop()
    auth_server.start()
    assert client.dbsize() == 1_000_000  # no BusyLoadingError
    client.close()


def test_the_consumers_reconnect_warning_does_not_show_the_password(
    auth_server: EmbeddedValkey, executor: str, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    conn = echomq.connect(_url(auth_server, PASSWORD, "userinfo"), executor=executor)  # type: ignore[arg-type]
    done: list[str] = []
    consumer = Consumer(conn, queue, lambda job: done.append(job.id), poll_ms=50)
    runner = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    caplog.set_level(logging.WARNING)
    runner.start()
    try:
        echomq.add(conn, queue, {"n": 1})
        wait_until(lambda: done, timeout=10)
        auth_server.stop()  # every claim now fails: the Consumer warns, and retries
        wait_until(lambda: "lost the server" in caplog.text, timeout=20)
        auth_server.start()  # back, with its AOF: the Consumer carries on
        echomq.add(conn, queue, {"n": 2})
        wait_until(lambda: len(done) == 2, timeout=20)
    finally:
        consumer.stop()
        runner.join(20)
        conn.close()
    assert "redis://:***@" in caplog.text
    assert PASSWORD not in caplog.text


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
    ("redis://user:pw@h/0", "redis://user:***@h/0"),
    ("rediss://u:p@ss/w@h:1/0?ssl_ca_certs=/ca.pem", "rediss://u:***@h:1/0?ssl_ca_certs=/ca.pem"),
    ("unix://:pw@/tmp/v.sock?db=0", "unix://:***@/tmp/v.sock?db=0"),
    ("redis://h/0?password=a@b&db=1", "redis://h/0?password=***&db=1"),
    ("redis://h/0?db=1&PassWord=zz", "redis://h/0?db=1&PassWord=***"),
    ("redis://user@h/0", "redis://user@h/0"),
    ("redis://h:1/0", "redis://h:1/0"),
    # issue 20, item 15: every query parameter whose name holds pass, secret or token
    ("rediss://u:pw@h:1/0?ssl_password=kp&ssl_ca_certs=/ca.pem",
     "rediss://u:***@h:1/0?ssl_password=***&ssl_ca_certs=/ca.pem"),
    ("redis://h/0?ssl_keyfile_password=kp;db=1", "redis://h/0?ssl_keyfile_password=***;db=1"),
    ("redis://h/0?db=1&client_secret=s1&Auth_Token=t1&x=2",
     "redis://h/0?db=1&client_secret=***&Auth_Token=***&x=2"),
    ("redis://h/0?ssl%5Fpassword=kp", "redis://h/0?ssl%5Fpassword=***"),
    ("redis://h/0?db=0&password=a#b?c", "redis://h/0?db=0&password=***"),
    ("unix:///run/emq/valkey.sock?password=pw&db=0", "unix:///run/emq/valkey.sock?password=***&db=0"),
    ("unix:///run/emq/valkey.sock?db=0&password=pw", "unix:///run/emq/valkey.sock?db=0&password=***"),
    ("unix://u:pw@/run/emq/valkey.sock?token=t", "unix://u:***@/run/emq/valkey.sock?token=***"),
    ("redis+sentinel://u:pw@h1:26379,h2/svc/0?sentinel_password=sp&ssl_password=kp",
     "redis+sentinel://u:***@h1:26379,h2/svc/0?sentinel_password=***&ssl_password=***"),
    ("h:1/0?password=pw", "h:1/0?password=***"),
])
def test_redaction_hides_every_password_form(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact_url(shown) == shown  # idempotent: redacting twice changes nothing


def _emq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "echomq", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("url", [
    # unreachable, with a client key's password: the error names the URL, redacted
    "rediss://u:{pw}@127.0.0.1:1/0?ssl_password={kp}",
    # ssl_password on redis:// is an option redis-py refuses: one line, not a traceback
    "redis://u:{pw}@127.0.0.1:1/0?ssl_password={kp}",
    "unix:///nonexistent/emq/valkey.sock?password={pw}&client_token={kp}",
])
def test_emq_status_on_a_url_it_cannot_use_shows_no_secret(url: str) -> None:
    """Issue 20, item 15: ``ssl_password=`` (and any other secret of the query) was printed
    as given in the one-line error."""
    done = _emq("--url", url.format(pw=PASSWORD, kp=WRONG), "status")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert PASSWORD not in out and WRONG not in out, out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    assert out.startswith("Error: ") and "***" in out, out


def test_the_workers_start_line_names_its_server_without_the_secrets(
        auth_server: EmbeddedValkey, queue: str) -> None:
    """The worker's start line (a real ``emq worker`` process, its real log) says where it
    works, every secret of the URL hidden."""
    url = (f"redis://default:{PASSWORD}@{auth_server.host}:{auth_server.port}/0"
           f"?password={PASSWORD}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", url, "worker", "tests.support.workers:slow",
         "--queue", queue], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "consumer on" in line:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)
    out = "".join(lines) + rest
    start = [ln for ln in lines if "consumer on" in ln]
    assert start, out
    assert f"at redis://default:***@{auth_server.host}:{auth_server.port}/0?password=***" in (
        start[0]), out
    assert PASSWORD not in out, out
