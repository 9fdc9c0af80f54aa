"""Fresh buckets, and what the archive holds: the ids in a remote's chain or a floor."""

from __future__ import annotations

import uuid
from typing import Any

from echomq.archive.s3_remote import S3Remote
from echomq.servers.s3 import S3Process


def bucket_name() -> str:
    return f"t-{uuid.uuid4().hex[:16]}"


def remote_on(server: S3Process, bucket: str, prefix: str = "", **options: Any) -> S3Remote:
    """An :class:`S3Remote` on one of the suite's S3 servers, in ``bucket`` (created unless
    ``create_bucket=False``): the server hands out its endpoint, the archive builds on it."""
    options.setdefault("create_bucket", True)
    return S3Remote.from_endpoint(server.endpoint(bucket), prefix, **options)


def remote_spec(remote: S3Remote, server: Any) -> dict[str, Any]:
    """How a child process rebuilds the same remote."""
    return {"bucket": remote.bucket, "prefix": remote.prefix, "endpoint_url": server.endpoint_url,
            "region": "us-east-1", "aws_access_key_id": server.access_key,
            "aws_secret_access_key": server.secret_key}


def folded_ids(remote: S3Remote, queue: str) -> list[str]:
    """Every stream id in the remote's chain for ``queue``, in order (duplicates kept)."""
    from echomq.archive.restore_plan import plan

    out: list[str] = []
    for ref in plan(remote, queue).chain:
        out += [item[0] for item in remote.get_slice(ref).items]
    return out


def floor_ids(floor: Any, queue: str) -> list[str]:
    from echomq.archive.stream_ids import id_key

    ids = [e.stream_id for e in floor.entries(queue)] + [
        q.stream_id for q in floor.quarantined(queue)]
    return sorted(ids, key=id_key)
