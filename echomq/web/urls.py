"""Paths the pages link to and post to: a queue name and a job id travel in the query
string (links) or the form body (actions), never as path segments.

A name may hold ``/``, ``?``, ``#``, ``%`` or be ``..`` (anything ``check_name`` takes), and
a browser resolves ``..`` and ``%2e%2e`` segments before it sends a request: a job id
``../../billing/jobs/x`` in a path would steer an action to another queue's job. A query
parameter is taken as it is, so every value is percent-encoded there (``safe=""``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request

from echomq.errors import InvalidArgument


def route_path(request: Request, name: str) -> str:
    """The path of route ``name`` (under the mount point), without parameters."""
    return str(request.url_for(name).path)


def with_query(path: str, **params: object) -> str:
    """``path`` with ``params`` (None ones left out) as a percent-encoded query."""
    given = {k: str(v) for k, v in params.items() if v is not None}
    return path + ("?" + urlencode(given, quote_via=quote, safe="") if given else "")


def queue_path(request: Request, queue: str, **params: object) -> str:
    """A queue's page (``state``, ``page`` as extra parameters)."""
    return with_query(route_path(request, "queue"), queue=queue, **params)


def job_path(request: Request, queue: str, job_id: str) -> str:
    """A job's page."""
    return with_query(route_path(request, "job"), queue=queue, job=job_id)


def named(request: Request, field: str, params: Mapping[str, Any] | None = None) -> str:
    """A queue name or job id: from the path (the earlier path routes) or else from
    ``params`` (the query string by default; an action passes its form)."""
    path_field = "job_id" if field == "job" else field
    if path_field in request.path_params:
        return str(request.path_params[path_field])
    given = (request.query_params if params is None else params).get(field)
    if not given:
        raise InvalidArgument(f"{field} is missing")
    return str(given)
