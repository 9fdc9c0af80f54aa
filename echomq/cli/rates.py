"""``emq rate-limit``: list, set or clear the rate limits of a queue and of its groups."""

from __future__ import annotations

import click

import echomq
from echomq.cli.app import as_click_error, connect, emit
from echomq.cli.durations import POSITIVE_DURATION, format_duration_ms


@click.command("rate-limit")
@click.option("--queue", "-q", required=True, help="The queue's name.")
@click.option("--max", "max_jobs", type=int, default=None,
              help="At most this many jobs start per window (1..100000).")
@click.option("--per", "per_ms", type=POSITIVE_DURATION, default=None,
              help="The window (500ms, 1s, 1m, 1h; at most 1d).")
@click.option("--group", "-g", default=None,
              help="Limit this group's jobs only (its lane; other groups flow on).")
@click.option("--clear", is_flag=True, help="Remove the limit (the queue's, or --group's).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def rate_limit(ctx: click.Context, queue: str, max_jobs: int | None, per_ms: int | None,
               group: str | None, clear: bool, as_json: bool) -> None:
    """Limit how many jobs of QUEUE (or of one --group) start per window, on the server's
    clock across every worker: `--max 100 --per 1s`. With --clear, remove it; with
    neither, list the limits. Refuses --max without --per (and the reverse), --clear with
    them, a count outside 1..100000, a window over a day and a bad queue or group name."""
    if clear and (max_jobs is not None or per_ms is not None):
        raise click.UsageError("--clear removes the limit; give no --max or --per with it")
    if (max_jobs is None) != (per_ms is None):
        raise click.UsageError("give both --max and --per (e.g. --max 100 --per 1s)")
    conn = connect(ctx, start=clear or max_jobs is not None)  # listing only reads
    with as_click_error():
        if clear:
            removed = echomq.clear_rate_limit(conn, queue, group=group)
            who = f"group {group!r} of {queue}" if group else queue
            emit({"queue": queue, "group": group, "cleared": removed} if as_json else
                 f"cleared the rate limit of {who}" if removed else
                 f"{who} had no rate limit", as_json)
            return
        if max_jobs is not None and per_ms is not None:
            echomq.set_rate_limit(conn, queue, max_jobs, per_ms, group=group)
        limits = echomq.rate_limits(conn, queue)
    if as_json:
        emit([{"group": lim.group, "max_jobs": lim.max_jobs, "per_ms": lim.per_ms}
              for lim in limits], True)
        return
    if not limits:
        click.echo(f"{queue} has no rate limits")
    for lim in limits:
        who = f"group {lim.group}" if lim.group is not None else "queue"
        click.echo(f"{who}: {lim.max_jobs} per {format_duration_ms(lim.per_ms)}")
