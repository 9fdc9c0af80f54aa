"""Issue 24: the FastAPI example runs: enqueue in one endpoint, await the result in another,
the dashboard mounted; through HTTP against the app, with a real worker and server."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from echomq.servers.valkey import EmbeddedValkey
from tests.support import ROOT


@pytest.fixture
def example(private_server: EmbeddedValkey, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("EMQ_URL", private_server.url)
    monkeypatch.syspath_prepend(str(ROOT))
    sys.modules.pop("examples.fastapi_app", None)
    module = importlib.import_module("examples.fastapi_app")
    worker = module.tasks.worker(poll_ms=20)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        yield module
    finally:
        worker.stop()
        thread.join(10)
        module.tasks.close()
        sys.modules.pop("examples.fastapi_app", None)


def test_an_endpoint_enqueues_and_another_awaits_the_result(example: Any) -> None:
    with TestClient(example.api) as client:
        made = client.post("/reports", params={"pages": 3})
        assert made.status_code == 200, made.text
        job_id = made.json()["job_id"]
        done = client.get(f"/reports/{job_id}", params={"timeout_s": 20})
        assert done.status_code == 200, done.text
        assert done.json() == {"state": "completed", "result": {"pages": 3},
                               "progress": {"page": 3, "of": 3}}
        assert client.get("/reports/999999", params={"timeout_s": 1}).status_code == 404
        assert client.post("/reports", params={"pages": 0}).status_code == 422


def test_the_dashboard_is_mounted_read_only_without_a_token(example: Any) -> None:
    with TestClient(example.api, base_url="http://127.0.0.1") as client:
        client.post("/reports", params={"pages": 1})
        page = client.get("/dashboard/")
        assert page.status_code == 200, page.text
        assert "reports" in page.text
