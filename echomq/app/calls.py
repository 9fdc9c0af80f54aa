"""A task call as a job's payload: ``{"args": [...], "kwargs": {...}}``.

This is the whole wire format of a task: any producer (another language included) that
adds a job with ``name`` set to a task's name and this payload reaches the task. An
optional ``"retry"`` object carries a per-job backoff (``{"base_ms", "cap_ms", "jitter"}``
or ``{"delay_ms"}``) given to ``enqueue_with(backoff=)``, and an optional ``"timeout_s"``
the job's own timeout (``enqueue_with(timeout_s=)``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from echomq.errors import Fail, InvalidArgument
from echomq.worker.retry import Backoff, BackoffSpec, Fixed


def call_payload(task: str, args: Sequence[Any], kwargs: Mapping[str, Any],
                 backoff: BackoffSpec | None = None,
                 timeout_s: float | None = None) -> dict[str, Any]:
    """The payload of one call of ``task``; arguments that are not JSON are refused here,
    naming the task, before anything reaches the wire."""
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise InvalidArgument(f"task {task!r}: args must be a list or tuple, got {args!r}")
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidArgument(f"task {task!r}: kwargs must be a dict with str keys")
    payload: dict[str, Any] = {"args": list(args), "kwargs": dict(kwargs)}
    if backoff is not None:
        payload["retry"] = _retry_field(task, backoff)
    if timeout_s is not None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
                timeout_s > 0):
            raise InvalidArgument(f"task {task!r}: timeout_s must be a number of seconds "
                                  f"above 0, got {timeout_s!r}")
        payload["timeout_s"] = timeout_s
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidArgument(f"task {task!r}: arguments are not JSON: {exc}") from None
    return payload


def _retry_field(task: str, backoff: BackoffSpec) -> dict[str, Any]:
    if isinstance(backoff, Backoff):
        return {"base_ms": backoff.base_ms, "cap_ms": backoff.cap_ms, "jitter": backoff.jitter}
    if isinstance(backoff, Fixed):
        return {"delay_ms": backoff.delay_ms}
    raise InvalidArgument(f"task {task!r}: a per-job backoff must be an echomq.Backoff or "
                          f"echomq.Fixed (a function cannot travel in a job), got {backoff!r}")


def call_arguments(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    """The ``(args, kwargs)`` of a task call's payload; ``Fail`` (dead at once: every retry
    would meet the same payload) when it is not of that shape."""
    if not isinstance(payload, dict):
        raise Fail(f'payload is not a task call {{"args": [...], "kwargs": {{...}}}}: '
                   f"{_short(payload)}")
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise Fail(f'payload is not a task call {{"args": [...], "kwargs": {{...}}}}: '
                   f"{_short(payload)}")
    return args, kwargs


def job_backoff(payload: Any) -> BackoffSpec | None:
    """The per-job backoff a payload carries, if any (a malformed one is ignored: the
    task's own policy applies)."""
    retry = payload.get("retry") if isinstance(payload, dict) else None
    if not isinstance(retry, dict):
        return None
    try:
        if "delay_ms" in retry:
            return Fixed(retry["delay_ms"])
        return Backoff(retry["base_ms"], retry["cap_ms"], bool(retry.get("jitter", True)))
    except (KeyError, InvalidArgument):
        return None


def _short(value: Any, limit: int = 200) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


def job_timeout(payload: Any) -> float | None:
    """The per-job timeout a payload carries, if any (a malformed one is ignored)."""
    value = payload.get("timeout_s") if isinstance(payload, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return float(value)
