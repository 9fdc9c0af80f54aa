"""The queue's commands: enqueue, cancel, sweep, reap, dead, purge, status."""

from __future__ import annotations

import sys

import click

import echomq
from echomq.cli.app import as_click_error, connect, emit, json_argument
from echomq.cli.durations import DURATION, POSITIVE_DURATION
from echomq.queue.dedup import DedupMode


@click.command()
@click.option("--queue", "-q", required=True)
@click.argument("payloads", nargs=-1)
@click.option("--job-id", default=None, help="The job's id (one payload only; an add with "
              "an id that exists changes nothing and prints it).")
@click.option("--name", default=None, help="The job's name (what a handler may dispatch on).")
@click.option("--group", default=None, help="Put the job in this group's lane.")
@click.option("--delay", "delay_ms", type=DURATION, default="0s", show_default=True,
              help="Schedule the job this far ahead (30s, 15m, 2h).")
@click.option("--priority", type=click.IntRange(0, 1023), default=0, show_default=True,
              help="0 runs first.")
@click.option("--max-attempts", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--dedup-id", default=None, help="Deduplicate (one payload only): while a job "
              "holds this id, nothing is added and its id is printed.")
@click.option("--dedup-mode", type=click.Choice(["until_done", "ttl", "debounce"]),
              default="until_done", show_default=True,
              help="How long the id is held (see echomq.add).")
@click.option("--dedup-ttl", "dedup_ttl_ms", type=POSITIVE_DURATION, default=None,
              help="The hold's TTL (required by --dedup-mode ttl; else an upper bound).")
@click.option("--json", "as_json", is_flag=True, help="Print {\"ids\": [...]}.")
@click.pass_context
def enqueue(ctx: click.Context, queue: str, payloads: tuple[str, ...], job_id: str | None,
            name: str | None, group: str | None, delay_ms: int, priority: int,
            max_attempts: int, dedup_id: str | None, dedup_mode: DedupMode,
            dedup_ttl_ms: int | None, as_json: bool) -> None:
    """Add jobs; each PAYLOAD is JSON text ('null' for none). Prints each new job's id.

    With no PAYLOAD, or PAYLOAD "-", the payloads come from stdin: one JSON document, or
    JSON lines (one job per line). Refuses a call with no payload at all, a payload that
    is not JSON, --job-id with several payloads, a bad queue name or id, and the limits
    of ``echomq.add`` (payload size, priority 0..1023, positive max attempts)."""
    bodies = [body for text in _payload_texts(payloads) for body in _decode(text)]
    if not bodies:
        raise click.UsageError("no payload: give PAYLOAD (JSON text, 'null' for none), or "
                               "pipe JSON on stdin")
    if job_id is not None and len(bodies) > 1:
        raise click.BadParameter(f"one id for {len(bodies)} payloads: give one payload",
                                 param_hint="--job-id")
    if dedup_id is not None or dedup_ttl_ms is not None or dedup_mode != "until_done":
        if len(bodies) > 1:
            raise click.BadParameter(f"one dedup id for {len(bodies)} payloads: give one "
                                     "payload", param_hint="--dedup-id")
        conn = connect(ctx)
        with as_click_error():
            ids = [echomq.add(conn, queue, bodies[0], job_id=job_id, delay_ms=delay_ms,
                              priority=priority, max_attempts=max_attempts, group=group,
                              name=name, dedup_id=dedup_id, dedup_ttl_ms=dedup_ttl_ms,
                              dedup_mode=dedup_mode)]
        if as_json:
            emit({"ids": ids}, True)
        else:
            click.echo(ids[0])
        return
    conn = connect(ctx)
    with as_click_error():
        ids = echomq.add_many(conn, queue, bodies, job_ids=None if job_id is None else [job_id],
                              delay_ms=delay_ms, priority=priority, max_attempts=max_attempts,
                              group=group, name=name)
    if as_json:
        emit({"ids": ids}, True)
    else:
        for new_id in ids:
            click.echo(new_id)


def _payload_texts(payloads: tuple[str, ...]) -> list[str]:
    """The PAYLOAD arguments, with stdin read for ``-`` or, with none, when it is piped
    (a terminal is never waited on)."""
    if not payloads:
        return [] if sys.stdin.isatty() else [sys.stdin.read()]
    return [sys.stdin.read() if p == "-" else p for p in payloads]


def _decode(text: str) -> list[object]:
    """One payload argument or stdin's text: one JSON document, else JSON lines; blank
    text (an empty pipe) holds none."""
    if not text.strip():
        return []
    try:
        return [json_argument(text)]
    except click.BadParameter:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2:
            raise
    return [json_argument(line, f"line {n} of stdin") for n, line in enumerate(lines, 1)
            if line.strip()]


@click.command()
@click.option("--queue", "-q", required=True)
@click.argument("job_id")
@click.option("--reason", default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def cancel(ctx: click.Context, queue: str, job_id: str, reason: str | None,
           as_json: bool) -> None:
    """Cancel JOB_ID: removed if unclaimed, signalled if running. Refuses a finished or
    unknown job."""
    conn = connect(ctx)
    with as_click_error():
        verdict = echomq.cancel.request(conn, queue, job_id, reason)
    emit({"job": job_id, "cancel": verdict} if as_json else verdict, as_json)


@click.command()
@click.option("--queue", "-q", required=True)
@click.option("--max-stalled", default=1, show_default=True,
              help="Stalls a job may have before it is dead-lettered (1 or more).")
@click.option("--limit", default=100, show_default=True,
              help="Lapsed jobs looked at in this pass (1 or more).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def sweep(ctx: click.Context, queue: str, max_stalled: int, limit: int, as_json: bool) -> None:
    """One stalled sweep, now (on functions, a pass meeting a lapsed grouped job runs
    the scripted sweep, as the Consumer and the scheduler do)."""
    from echomq.jobs.stalled import sweep_stalled

    conn = connect(ctx)
    with as_click_error():
        result = sweep_stalled(conn, queue, max_stalled, limit)
    emit({"recovered": result.recovered, "dead": result.dead}, as_json)


@click.command()
@click.option("--queue", "-q", required=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def reap(ctx: click.Context, queue: str, as_json: bool) -> None:
    """Return every lapsed lease to pending, now. Refuses a bad queue name."""
    with as_click_error():
        emit({"reaped": echomq.reap(connect(ctx), queue)}, as_json)


@click.command()
@click.option("--queue", "-q", required=True)
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True,
              help="The most jobs listed (1 or more).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dead(ctx: click.Context, queue: str, limit: int, as_json: bool) -> None:
    """List dead-lettered jobs with their last error. Refuses a --limit below 1 and a bad
    queue name."""
    conn = connect(ctx, start=False)
    rows = []
    with as_click_error():
        for job_id in echomq.dead_jobs(conn, queue, limit):
            job = echomq.get_job(conn, queue, job_id)
            rows.append({"id": job_id, "attempts": job.attempts if job else None,
                         "last_error": job.last_error if job else None})
    if as_json:
        emit(rows, True)
        return
    for row in rows:
        click.echo(f"{row['id']}\tattempts={row['attempts']}\t{row['last_error']}")


@click.command()
@click.option("--queue", "-q", required=True)
@click.option("--state", type=click.Choice(["dead", "completed"]), default="dead",
              show_default=True)
@click.option("--keep", type=click.IntRange(min=0), default=0, show_default=True,
              help="The newest rows to keep.")
@click.option("--older-than", type=DURATION, default=None,
              help="Only rows that finished longer ago than this (30s, 15m, 7d, 400d).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def purge(ctx: click.Context, queue: str, state: str, keep: int, older_than: int | None,
          as_json: bool) -> None:
    """Forget finished jobs in Redis, oldest first (both --keep and --older-than must
    hold for a row to go). On a declared queue only rows whose outcome the archive has
    folded go; the others are kept for the archive and counted. Refuses a negative
    --keep and a duration without a unit."""
    from echomq.queue.retention import purge_counted

    conn = connect(ctx)
    with as_click_error():
        done = purge_counted(conn, queue, state, keep=keep, older_than_ms=older_than)
    if as_json:
        emit({"queue": queue, "state": state, "purged": done.forgotten,
              "kept_for_archive": done.kept_for_archive}, True)
        return
    kept = (f"; {done.kept_for_archive} kept for the archive (not folded yet)"
            if done.kept_for_archive else "")
    click.echo(f"purged {done.forgotten} {state} job(s){kept}")


@click.command()
@click.option("--queue", "-q", default=None,
              help="One queue; default: every queue (as `emq queues` lists them).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, queue: str | None, as_json: bool) -> None:
    """Jobs per state now (pending, scheduled, active, completed, dead: the rows a purge
    forgets go), whether it is paused, and the lifetime totals of settled attempts
    (completed_total, cancelled_total, retried_total, dead_total: never lowered by a
    purge); without --queue, of every queue (one line each, or {"queues": {name: ...}}
    with --json), each read in its own slot.

    Refuses a bad queue name."""
    conn = connect(ctx, start=False)
    with as_click_error():
        if queue is not None:
            emit(_status_of(conn, queue), as_json)
            return
        found = {name: _status_of(conn, name) for name in echomq.queues(conn)}
    if as_json:
        emit({"queues": found}, True)
        return
    for name, row in found.items():
        click.echo(f"{name}: " + " ".join(f"{k}={v}" for k, v in row.items()))


def _status_of(conn: echomq.Connection, queue: str) -> dict[str, int | bool]:
    """The rows in each state now, then the lifetime totals, named apart (``completed``
    is rows, ``completed_total`` attempts ever completed)."""
    totals = {f"{outcome}_total": n for outcome, n in echomq.metrics(conn, queue).items()}
    return {**echomq.counts(conn, queue).as_dict(), **totals}
