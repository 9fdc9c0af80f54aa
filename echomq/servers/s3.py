"""The S3 endpoints we start for development and tests share this: an HTTP readiness
check and an :class:`~echomq.archive.remote.S3Remote` with the endpoint's credentials."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from echomq.servers.process import ServerProcess

if TYPE_CHECKING:
    from echomq.archive.remote import S3Remote


class S3Process(ServerProcess):
    """A child S3 endpoint: ready once its port answers HTTP (a 403 is an answer)."""

    stop_timeout_s = 15.0

    def __init__(self, host: str, owned_dir: Path | None = None) -> None:
        super().__init__(host, owned_dir)
        self.port = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def where(self) -> str:
        return self.endpoint_url

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint_url + "/", timeout=2):
                return True
        except urllib.error.HTTPError as answer:
            answer.close()
            return True  # it answers (403 without credentials is an answer)
        except OSError:
            return False

    def remote(self, bucket: str, prefix: str = "", **options: object) -> S3Remote:
        """An :class:`S3Remote` on this endpoint with our credentials (bucket created)."""
        from echomq.archive.remote import S3Remote

        options.setdefault("create_bucket", True)
        return S3Remote(bucket, prefix, endpoint_url=self.endpoint_url, region="us-east-1",
                        aws_access_key_id=self.access_key,
                        aws_secret_access_key=self.secret_key, **options)  # type: ignore[arg-type]

    access_key = ""
    secret_key = ""
