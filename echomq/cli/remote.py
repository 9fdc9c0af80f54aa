"""The one S3 remote builder of the command line: the same options and ``EMQ_S3_*``
variables for every command that reaches the bucket (``emq archive ...``,
``emq scheduler --fold``), so that they cannot drift apart."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from echomq.archive.s3_remote import S3Remote

_OPTIONS = [
    click.option("--bucket", envvar="EMQ_S3_BUCKET", help="S3 bucket (none: floor only)."),
    click.option("--s3-prefix", "prefix", envvar="EMQ_S3_PREFIX", default="",
                 help="The prefix of every object key in the bucket (not the Redis key "
                 "prefix, emq --prefix)."),
    click.option("--endpoint-url", envvar="EMQ_S3_ENDPOINT_URL",
                 help="S3-compatible endpoint (SeaweedFS, Tigris); none for AWS."),
    click.option("--region", envvar="EMQ_S3_REGION", help="Region (Tigris: auto)."),
    click.option("--checksum", envvar="EMQ_S3_CHECKSUM", default="when_required",
                 type=click.Choice(["when_required", "when_supported"]),
                 help="boto3 request_checksum_calculation."),
    click.option("--create-bucket", is_flag=True, envvar="EMQ_S3_CREATE_BUCKET",
                 help="Create the bucket when it does not exist."),
]


@dataclass(frozen=True)
class RemoteSettings:
    """Where the remote is, as the options and ``EMQ_S3_*`` say."""

    bucket: str | None
    prefix: str
    endpoint_url: str | None
    region: str | None
    checksum: str
    create_bucket: bool

    def build(self, required: bool = False) -> S3Remote | None:
        """The :class:`S3Remote`, or None without a bucket (a usage error if ``required``).
        boto3 is imported here, by the commands that reach a bucket, and only by them."""
        if not self.bucket:
            if required:
                raise click.UsageError("this command needs --bucket (or EMQ_S3_BUCKET)")
            return None
        from echomq.archive.s3_remote import S3Remote

        return S3Remote(self.bucket, self.prefix, endpoint_url=self.endpoint_url,
                        region=self.region, request_checksum_calculation=self.checksum,
                        create_bucket=self.create_bucket)

    def need(self) -> S3Remote:
        """The remote of a command that cannot run without one."""
        remote = self.build(required=True)
        assert remote is not None
        return remote


def remote_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the S3 options to a command; it receives them as one ``s3: RemoteSettings``."""
    names = [f.name for f in fields(RemoteSettings)]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        settings = RemoteSettings(**{name: kwargs.pop(name) for name in names})
        return fn(*args, s3=settings, **kwargs)

    for option in reversed(_OPTIONS):
        wrapper = option(wrapper)
    return wrapper
