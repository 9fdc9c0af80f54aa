"""Paths the pages link to that Starlette's ``url_for`` cannot build: a job id may hold
``/``, ``?``, ``#`` or ``%``, so it is percent-encoded here (its route takes a path)."""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request


def job_path(request: Request, queue: str, job_id: str) -> str:
    """The path of ``job_id``'s page (under the mount point)."""
    return str(request.url_for("queue", queue=queue).path) + "/jobs/" + quote(job_id, safe="/")
