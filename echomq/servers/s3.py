"""The S3 endpoints we start for development and tests share this: an HTTP readiness
check and a plain :class:`S3Endpoint` (URL, keys, region, bucket) to reach them with.

The launchers hand out values, not clients: the archive builds its own remote from them
(``S3Remote.from_endpoint``), so a launcher never imports the archive (or boto3's remote).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from echomq.servers.process import ServerProcess


@dataclass(frozen=True)
class S3Endpoint:
    """Where an S3 endpoint answers and the keys it wants; ``bucket`` empty when the
    caller names one later. Plain values, so a child process can be handed them too."""

    url: str
    access_key: str
    secret_key: str = field(repr=False)  # never in a log or a failed assertion
    region: str = "us-east-1"
    bucket: str = ""


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

    def endpoint(self, bucket: str = "") -> S3Endpoint:
        """This endpoint's URL and credentials (``bucket`` is not created here: the
        remote built from it does that when asked, ``create_bucket=True``)."""
        return S3Endpoint(self.endpoint_url, self.access_key, self.secret_key, bucket=bucket)

    access_key = ""
    secret_key = ""
