"""Issue 8, item 15: a store that answers 200 and keeps nothing never gets the stream trimmed.

A real HTTP proxy sits in front of SeaweedFS or moto and answers 200 to PUTs without
forwarding them; the driver must see, before trimming, that the objects are not there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from echomq.archive import Driver, Floor, S3Remote, restore, verify
from echomq.errors import RemoteUnavailable
from tests.support.archive import bucket_name, folded_ids
from tests.support.proxies import FlakyProxy
from tests.support.recorder import Recorder

SWALLOW: dict[str, Callable[[str], bool]] = {
    "every-put": lambda path: True,
    "slices": lambda path: "/slices/" in path,
    "manifest": lambda path: path.endswith("/manifest.json"),
}


@pytest.fixture(params=["seaweed", "moto"])
def s3(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


@pytest.fixture
def proxy(s3: Any) -> Iterator[FlakyProxy]:
    server = FlakyProxy(s3.endpoint_url)
    yield server
    server.close()


def through(proxy: FlakyProxy, s3: Any, bucket: str) -> S3Remote:
    return S3Remote(bucket, "archive/", proxy.endpoint_url, "us-east-1", s3.access_key,
                    s3.secret_key, retries=1, backoff_s=0.01)


@pytest.mark.parametrize("swallowed", sorted(SWALLOW))
def test_a_store_that_keeps_nothing_never_gets_the_stream_trimmed(
        swallowed: str, rec: Recorder, s3: Any, proxy: FlakyProxy, floor_path: Path,
        tmp_path: Path) -> None:
    direct = s3.remote(bucket_name(), "archive/", retries=1, backoff_s=0.01)
    lying = through(proxy, s3, direct.bucket)
    rec.add(30)
    proxy.swallow = SWALLOW[swallowed]
    with Floor(floor_path) as floor:
        with pytest.raises(RemoteUnavailable, match="nothing is trimmed") as info:
            Driver(rec.conn, floor, lying, slice_count=10).fold(rec.queue)
        assert proxy.swallowed >= 1
        assert type(info.value).__name__ == "UploadUnconfirmed"
        assert info.value.report.trimmed == 0  # type: ignore[attr-defined]
        assert rec.conn.redis.xlen(rec.key) == 30
        assert floor.status(rec.queue).pending == 1  # committed, not counted as uploaded

        proxy.swallow = None  # the store is healthy again: the next fold converges
        report = Driver(rec.conn, floor, lying, slice_count=10).fold(rec.queue)
        assert (report.uploaded, report.trimmed) == (3, 30)
        assert rec.conn.redis.xlen(rec.key) == 0
    written = rec.written_ids()
    assert folded_ids(direct, rec.queue) == written
    assert verify(direct, [rec.queue], progress=False)[rec.queue].entries == 30
    assert restore(direct, tmp_path / "again", progress=False)[rec.queue].entries == 30


def test_a_slice_lost_after_its_upload_is_caught_before_the_trim(
        rec: Recorder, s3: Any, proxy: FlakyProxy, floor_path: Path) -> None:
    """The object vanished between the PUT and the trim (a store that drops writes
    later): the HEAD before the trim sees it is gone."""
    direct = s3.remote(bucket_name(), "archive/", retries=1, backoff_s=0.01)
    rec.add(10)

    def drop(point: str) -> None:
        if point == "before_manifest":
            ref = direct.list_slices(rec.queue)[0]
            direct.client.delete_object(Bucket=direct.bucket, Key=direct.prefix + ref.name)

    with pytest.raises(RemoteUnavailable, match="does not have the object"):
        Driver(rec.conn, floor_path, direct, slice_count=10, hook=drop).fold(rec.queue)
    assert rec.conn.redis.xlen(rec.key) == 10
    report = Driver(rec.conn, floor_path, direct, slice_count=10).fold(rec.queue)
    assert (report.uploaded, report.trimmed) == (1, 10)
    assert len(folded_ids(direct, rec.queue)) == 10
