"""Issue 24: ``aio.connect`` over ``rediss://`` (stunnel in front of Valkey, as
``tests/queue/test_tls.py``): the right CA adds and reads, another CA is refused with
the sync connect's clear error, the password never shown."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import trustme

import echomq
from echomq import aio
from tests.queue.test_tls import PASSWORD, TlsEndpoint, tls_endpoint  # noqa: F401


def test_aio_over_tls_adds_and_reads(tls_endpoint: TlsEndpoint) -> None:  # noqa: F811
    async def body() -> echomq.Job | None:
        async with await aio.connect(tls_endpoint.url()) as aconn:
            job_id = await aio.add(aconn, "tls-q", {"n": 1})
            return await aio.get_job(aconn, "tls-q", job_id)

    job = asyncio.run(body())
    assert job is not None and job.payload == {"n": 1}


def test_aio_refuses_another_ca_as_the_sync_connect(tls_endpoint: TlsEndpoint,  # noqa: F811
                                                    tmp_path: Path) -> None:
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    url = tls_endpoint.url(ca_pem=other)
    with pytest.raises(echomq.ConnectionFailed) as sync_refusal:
        echomq.connect(url)
    with pytest.raises(echomq.ConnectionFailed) as refusal:
        asyncio.run(aio.connect(url))
    message = str(refusal.value)
    assert PASSWORD not in message and "***" in message
    assert "certificate verify failed" in message
    assert message.split(":")[0] == str(sync_refusal.value).split(":")[0]
