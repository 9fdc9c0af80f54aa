"""The cron commands: schedule, unschedule, schedules, pause-schedule, resume-schedule.

``emq scheduler`` fires what these store (each fire time once, however many schedulers
run); these commands only store, remove and list schedules.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

import echomq
from echomq.cli.app import as_click_error, connect, emit, json_argument
from echomq.cli.durations import DURATION
from echomq.records import Schedule


def _when(ms: int | None) -> str | None:
    """An epoch-ms time as ISO 8601 UTC (seconds), for people and for --json alike."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _row(s: Schedule) -> dict[str, Any]:
    return {"name": s.name, "cron": s.cron, "timezone": s.timezone, "payload": s.payload,
            "options": s.options, "next_fire": _when(s.next_fire_at),
            "last_fire": _when(s.last_fire_at), "paused": s.paused}


@click.command()
@click.option("--queue", "-q", required=True)
@click.argument("name")
@click.argument("cron")
@click.argument("payload", required=False, default="null")
@click.option("--timezone", default="UTC", show_default=True,
              help="The zone the expression is read in (an IANA name).")
@click.option("--priority", default=0, show_default=True)
@click.option("--max-attempts", default=3, show_default=True)
@click.option("--delay", "delay_ms", type=DURATION, default="0s", show_default=True,
              help="Each fired job runs this long after its fire time (30s, 15m).")
@click.option("--group", default=None)
@click.option("--job-name", default=None, help="The name each fired job carries.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object (times as ISO 8601 UTC, as in the human output).")
@click.pass_context
def schedule(ctx: click.Context, queue: str, name: str, cron: str, payload: str, timezone: str,
             priority: int, max_attempts: int, delay_ms: int, group: str | None,
             job_name: str | None, as_json: bool) -> None:
    """Store (or replace) the cron schedule NAME: every fire of CRON enqueues PAYLOAD
    (JSON text, default null) once, as job cron-NAME-<fire ms>.

    CRON is a crontab line ("*/5 * * * *") or 6 fields with seconds first
    ("*/10 * * * * *"); weekday numbers follow APScheduler 3 (0 = Monday), names
    (mon..sun) are safest. Refuses a bad name, expression, timezone, option or
    payload before anything is stored.
    """
    body = json_argument(payload)
    conn = connect(ctx)
    with as_click_error():
        stored = echomq.schedule(conn, queue, name, cron, body, timezone=timezone,
                                 priority=priority, max_attempts=max_attempts,
                                 delay_ms=delay_ms, group=group, name=job_name)
    emit(_row(stored), as_json)


@click.command()
@click.option("--queue", "-q", required=True)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def unschedule(ctx: click.Context, queue: str, name: str, as_json: bool) -> None:
    """Remove the cron schedule NAME (jobs it already enqueued stay). Exits 1 when there
    is no such schedule; refuses a name that is not a usable key part."""
    conn = connect(ctx)
    with as_click_error():
        existed = echomq.unschedule(conn, queue, name)
    emit({"name": name, "removed": existed}, as_json)
    if not existed:
        ctx.exit(1)


@click.command()
@click.option("--queue", "-q", required=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def schedules(ctx: click.Context, queue: str, as_json: bool) -> None:
    """List the cron schedules of the queue: name, cron, next fire, last fire (UTC).
    Refuses a queue name that is not a usable key part."""
    conn = connect(ctx, start=False)
    with as_click_error():
        found = echomq.schedules(conn, queue)
    if as_json:
        emit([_row(s) for s in found], True)
        return
    if not found:
        click.echo("no schedules")
    for s in found:
        click.echo(f"{s.name}\t{s.cron}\t{s.timezone}\tnext {_when(s.next_fire_at) or '-'}"
                   f"\tlast {_when(s.last_fire_at) or '-'}")


@click.command("pause-schedule")
@click.option("--queue", "-q", required=True)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def pause_schedule(ctx: click.Context, queue: str, name: str, as_json: bool) -> None:
    """Pause the cron schedule NAME: no fire until resume-schedule (the times it misses
    are never fired). Exits 1 when there is no such schedule."""
    conn = connect(ctx)
    with as_click_error():
        changed = echomq.pause_schedule(conn, queue, name)
    emit({"name": name, "paused": True, "changed": changed}, as_json)


@click.command("resume-schedule")
@click.option("--queue", "-q", required=True)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def resume_schedule(ctx: click.Context, queue: str, name: str, as_json: bool) -> None:
    """Resume the paused cron schedule NAME from its next fire time. Exits 1 when there
    is no such schedule."""
    conn = connect(ctx)
    with as_click_error():
        changed = echomq.resume_schedule(conn, queue, name)
    emit({"name": name, "paused": False, "changed": changed}, as_json)
