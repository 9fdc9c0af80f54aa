"""Watching a queue from the shell: ``emq wait`` for one job's end, ``emq events`` for
its typed events as they happen."""

from __future__ import annotations

import json
from typing import Any

import click

import echomq
from echomq.cli.app import as_click_error, connect, emit
from echomq.cli.durations import Duration
from echomq.cli.text import human
from echomq.errors import WaitTimeout
from echomq.queue.wait import outcome

EXIT = {"completed": 0, "dead": 3, "timeout": 4, "cancelled": 5}
"""``emq wait``'s exit status per outcome (1: an error such as no such job)."""

TIMEOUT = Duration(minimum=1, bare_unit="s")
"""``--timeout``: a duration (500ms, 30s, 5m); a bare number is seconds, as before units."""


def job_summary(job: echomq.Job) -> dict[str, Any]:
    """What ``emq wait`` prints about a finished job (``finished_at`` in epoch ms; the
    human output shows it as ISO 8601). ``result`` is the decoded value; a cancelled
    job has ``cancel_reason`` instead."""
    out = {"id": job.id, "outcome": outcome(job), "state": str(job.state),
           "attempts": job.attempts, "result": job.result, "last_error": job.last_error,
           "progress": job.progress, "finished_at": job.finished_at}
    if job.cancelled:
        out["cancel_reason"] = job.cancel_reason
    return out


@click.command()
@click.option("--queue", "-q", required=True)
@click.argument("job_id")
@click.option("--timeout", "timeout_ms", type=TIMEOUT, default=None,
              help="Give up after this long (500ms, 30s, 5m; a bare number is seconds; "
              "default: wait as long as it takes).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object; finished_at in ms since the epoch (UTC).")
@click.pass_context
def wait(ctx: click.Context, queue: str, job_id: str, timeout_ms: int | None,
         as_json: bool) -> None:
    """Wait for JOB_ID to finish (completed, cancelled or dead; a failure that will be
    retried is not the end) and print how it ended. It listens, it does not poll.

    Exit status: 0 completed, 3 dead, 4 timed out, 5 cancelled, 1 an error. Refuses
    (status 1) an unknown job id and a job removed while waited on; (status 2) a
    timeout that is not a positive duration.
    """
    conn = connect(ctx, start=False)
    with as_click_error():
        try:
            job = echomq.wait(conn, queue, job_id, _seconds(timeout_ms))
        except WaitTimeout as exc:
            emit({"id": job_id, "outcome": "timeout", "error": str(exc)}, as_json)
            ctx.exit(EXIT["timeout"])
    summary = job_summary(job)
    emit(summary, as_json)
    ctx.exit(EXIT[summary["outcome"]])


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def event_line(event: echomq.Event) -> str:
    """One event as a line: its kind, then its job and what it carries (a reason as a
    JSON string, a progress value as JSON)."""
    parts = [event.event]
    if event.job_id is not None:
        parts.append(event.job_id)
    if event.reason is not None:
        parts.append(json.dumps(event.reason, ensure_ascii=False))  # quoted, one line
    if event.kind is echomq.EventKind.PROGRESS:
        parts.append(human(event.value))
    return " ".join(parts)


@click.command()
@click.option("--queue", "-q", required=True)
@click.option("--count", type=int, default=None, help="Stop after this many events.")
@click.option("--timeout", "timeout_ms", type=TIMEOUT, default=None,
              help="Stop after this long (500ms, 30s, 5m; a bare number is seconds).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
def events(ctx: click.Context, queue: str, count: int | None, timeout_ms: int | None,
           as_json: bool) -> None:
    """Print the queue's events as they happen, one line each, until --count events,
    --timeout or Ctrl-C: added, paused, resumed, cancel, progress, completed,
    cancelled, failed (a retry is scheduled) and dead. At most once: an event published
    while nobody listens is gone. A progress value prints as JSON. Refuses a count or
    timeout that is not positive."""
    conn = connect(ctx, start=False)
    with as_click_error(), echomq.events(conn, queue, count=count,
                                         timeout_s=_seconds(timeout_ms)) as stream:
        for event in stream:
            if as_json:
                emit({"event": event.event, "job": event.job_id, "reason": event.reason,
                      "value": event.value}, True)
            else:
                click.echo(event_line(event))
