"""Every Python block of the README runs as written, in order, in one namespace.

The blocks run against a private Valkey (``EMQ_URL``) and the suite's SeaweedFS (the
``EMQ_S3_*`` variables and the boto3 credentials chain), from a scratch folder, exactly as a
user would paste them. A block that calls ``.run()`` on a Consumer runs on a thread until
the queue has nothing left to do; then the Consumer is stopped as a signal would stop it.
(It lives beside the archive tests because the README's archive block needs their S3.)
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import echomq
from echomq.archive.seaweed import SeaweedS3
from echomq.queue.embedded import EmbeddedValkey
from tests.support import ROOT
from tests.support.archive import bucket_name

README = ROOT / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


@pytest.fixture
def readme_env(tmp_path: Path, private_server: EmbeddedValkey, seaweed: SeaweedS3,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    bucket = bucket_name()
    seaweed.remote(bucket, create_bucket=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EMQ_URL", private_server.url)
    monkeypatch.setenv("EMQ_S3_BUCKET", bucket)
    monkeypatch.setenv("EMQ_S3_ENDPOINT_URL", seaweed.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweed.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweed.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    yield private_server.url


def run_until_idle(block: str, namespace: dict[str, Any]) -> None:
    """Run a block that ends in ``consumer.run()``; stop it once its queue is idle."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            exec(block, namespace)
        except BaseException as exc:  # surfaced in the test below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not errors:
        consumer = namespace.get("consumer")
        if isinstance(consumer, echomq.Consumer):
            c = echomq.counts(consumer.conn, consumer.queue)
            if c.pending == c.active == c.scheduled == 0 and c.completed > 0:
                consumer.stop()
                break
        time.sleep(0.05)
    thread.join(timeout=30)
    assert not errors, f"README block raised: {errors[0]!r}"
    assert not thread.is_alive(), "the README's Consumer did not stop"


def test_the_readme_has_python_blocks() -> None:
    assert len(python_blocks()) >= 2


def test_every_python_block_of_the_readme_runs_as_written(readme_env: str) -> None:
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    for block in python_blocks():
        if re.search(r"^\w+\.run\(\)", block, flags=re.M):
            run_until_idle(block, namespace)
        else:
            exec(block, namespace)
    conn = echomq.connect(readme_env)
    c = echomq.counts(conn, "mail")
    assert (c.pending, c.active, c.dead, c.completed) == (0, 0, 0, 2)  # one was cancelled
    restored = echomq.archive.Floor(".echomq/restored")
    assert len(restored.history("mail", namespace["ids"][0])) == 1
    conn.close()
