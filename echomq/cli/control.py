"""The operator's commands: pause, resume, retry, remove, promote, jobs, show.

Each is one library verb (``echomq.pause`` ...); a refusal (a bad name, an unknown or
held job) is a one-line ``Error:`` and exit status 1.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict
from typing import Any

import click

import echomq
from echomq.cli.app import as_click_error, connect, emit
from echomq.cli.text import debug_lines
from echomq.models import JobState
from echomq.records import Job

STATES = [s.value for s in JobState]
ERROR_WIDTH = 72
"""How much of a last error a row of ``emq jobs`` shows (``--json`` has all of it)."""

queue_option = click.option("--queue", "-q", required=True, help="The queue's name.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")


def _when(ms: int | None) -> str | None:
    """A server-clock millisecond time as ISO 8601 UTC (None stays None)."""
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def job_dict(job: Job) -> dict[str, Any]:
    """Everything ``emq show`` prints about a job, in reading order."""
    out: dict[str, Any] = {
        "id": job.id, "state": str(job.state), "attempts": job.attempts,
        "max_attempts": job.max_attempts, "retried": job.retried, "priority": job.priority,
        "group": job.group, "name": job.name, "payload": job.payload,
        "last_error": job.last_error, "result": job.result,
    }
    if job.cancelled:
        out["cancel_reason"] = job.cancel_reason
    if "progress" in job.raw:
        out["progress"] = job.progress
    if job.dedup_id is not None:
        out["dedup_id"] = job.dedup_id
        if job.debounced:
            out["debounced"] = job.debounced
    if job.parent is not None:  # a flow's links (echomq.chain, chord)
        out["parent"] = job.parent
    if job.children:
        out["children"] = job.children
    out |= {"created_at": _when(job.created_at), "claimed_at": _when(job.claimed_at),
            "finished_at": _when(job.finished_at), "entry": job.entry}
    return out


def _ids_line(ids: list[str], shown: int = 20) -> str:
    """A flow parent's children on one line: the first ``shown``, then how many in all."""
    if len(ids) <= shown:
        return ", ".join(ids)
    return ", ".join(ids[:shown]) + f", ... ({len(ids)} in all; --json lists them)"


def _one_line(text: str | None) -> str:
    """A last error's final line (a traceback ends with the exception), cut to fit a row."""
    if not text:
        return ""
    last = text.strip().splitlines()[-1] if text.strip() else ""
    return last if len(last) <= ERROR_WIDTH else last[:ERROR_WIDTH - 3] + "..."


@click.command()
@queue_option
@json_option
@click.pass_context
def pause(ctx: click.Context, queue: str, as_json: bool) -> None:
    """Stop QUEUE handing out jobs to every Consumer; held jobs run on and settle, adds
    still land. Refuses a bad queue name."""
    with as_click_error():
        changed = echomq.pause(connect(ctx), queue)
    emit({"queue": queue, "paused": True, "changed": changed} if as_json else
         f"paused {queue}" if changed else f"{queue} was already paused", as_json)


@click.command()
@queue_option
@json_option
@click.pass_context
def resume(ctx: click.Context, queue: str, as_json: bool) -> None:
    """Let a paused QUEUE hand out jobs again (idle Consumers wake at once). Refuses a
    bad queue name, and a queue an obliterate is taking apart (obliterate it again to
    finish)."""
    with as_click_error():
        changed = echomq.resume(connect(ctx), queue)
    emit({"queue": queue, "paused": False, "changed": changed} if as_json else
         f"resumed {queue}" if changed else f"{queue} was not paused", as_json)


@click.command()
@queue_option
@click.argument("job_ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Retry every dead job (oldest first).")
@click.option("--limit", default=1000, show_default=True,
              help="Jobs moved per server call (1..1000).")
@json_option
@click.pass_context
def retry(ctx: click.Context, queue: str, job_ids: tuple[str, ...], every: bool, limit: int,
          as_json: bool) -> None:
    """Bring dead jobs back to pending with fresh tries, keeping their last error; prints
    how many moved. JOB_IDs that are not dead are skipped. Refuses to run without
    JOB_IDs unless --all is given (and with both), and a bad name or limit."""
    if bool(job_ids) == every:
        raise click.UsageError("give the dead JOB_IDs to retry, or --all for every dead job")
    with as_click_error():
        moved = echomq.retry_dead(connect(ctx), queue, None if every else list(job_ids),
                                  limit=limit)
    emit({"retried": moved} if as_json else f"retried {moved} dead job(s)", as_json)


@click.command()
@queue_option
@click.argument("job_id")
@json_option
@click.pass_context
def remove(ctx: click.Context, queue: str, job_id: str, as_json: bool) -> None:
    """Delete JOB_ID (pending, scheduled, completed or dead: its row and set entry).
    Refuses an active job (it settles first) and an unknown one."""
    with as_click_error():
        echomq.remove_job(connect(ctx), queue, job_id)
    emit({"removed": job_id} if as_json else f"removed {job_id}", as_json)


@click.command()
@queue_option
@click.argument("job_id")
@json_option
@click.pass_context
def promote(ctx: click.Context, queue: str, job_id: str, as_json: bool) -> None:
    """Make scheduled JOB_ID (delayed, or a retry waiting on its backoff) pending now.
    Refuses an unknown job and one that is not scheduled."""
    with as_click_error():
        echomq.promote(connect(ctx), queue, job_id)
    emit({"promoted": job_id} if as_json else f"promoted {job_id}", as_json)


@click.command()
@queue_option
@click.option("--state", type=click.Choice(STATES), required=True)
@click.option("--start", default=0, show_default=True, help="Rows to skip (the page's start).")
@click.option("--count", default=20, show_default=True, help="Rows in the page (1..1000).")
@click.option("--oldest-first", is_flag=True, help="The set's lowest score first.")
@json_option
@click.pass_context
def jobs(ctx: click.Context, queue: str, state: str, start: int, count: int,
         oldest_first: bool, as_json: bool) -> None:
    """One page of the jobs in STATE, newest first, with their attempts and last error.
    Pending lists ungrouped jobs first, then each group's lane. Refuses a bad name, a
    negative start and a count outside 1..1000."""
    with as_click_error():
        page = echomq.list_jobs(connect(ctx, start=False), queue, state, start=start, count=count,
                                newest_first=not oldest_first)
    if as_json:
        emit([job_dict(job) for job in page], True)
        return
    if not page:
        click.echo(f"no {state} jobs from position {start}")
        return
    click.echo("id\tattempts\tretried\tlast_error")
    for job in page:
        click.echo(f"{job.id}\t{job.attempts}\t{job.retried}\t{_one_line(job.last_error)}")
    if len(page) == count:
        click.echo(f"(next page: --start {start + count})")


@click.command()
@queue_option
@click.argument("job_id")
@json_option
@click.option("--tracebacks", is_flag=True,
              help="Print each failed attempt's traceback under its error (--json has them).")
@click.pass_context
def show(ctx: click.Context, queue: str, job_id: str, as_json: bool, tracebacks: bool) -> None:
    """Everything the row of JOB_ID holds: state, attempts, retried, last error, result,
    progress, times, then each failed attempt's error (time, attempt, type, message; the
    last 10) and its log lines (job.log). Refuses an unknown job and a bad name."""
    with as_click_error():
        job = echomq.get_job(connect(ctx, start=False), queue, job_id)
    if job is None:
        raise click.ClickException(f"no job {job_id!r} in {queue!r}")
    row = job_dict(job)
    errors = [asdict(e) for e in job.errors]
    logs = [asdict(line) for line in job.logs]
    if as_json:
        emit(row | {"errors": errors, "logs": logs}, as_json)
        return
    row["payload"] = json.dumps(job.payload)
    if job.children:
        row["children"] = _ids_line(job.children)
    emit(row, as_json)
    for line in debug_lines(errors, logs, tracebacks):
        click.echo(line)
