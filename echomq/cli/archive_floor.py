"""``emq archive status``, ``audit``, ``show`` and ``ack-gap``: the commands that read (or
acknowledge a gap in) the floor alone, never Redis or the bucket. A floor that is not
there is refused, never created."""

from __future__ import annotations

import os
import sys

import click

from echomq.archive.entries import Outcome, iter_jsonl
from echomq.archive.floor_gaps import Gap
from echomq.cli.archive_options import (
    QueueFirst,
    existing_floor,
    floor_option,
    guard,
    json_option,
)
from echomq.cli.archive_output import audit_table, emit_rows, warn_gaps
from echomq.cli.text import debug_lines
from echomq.cli.text import time_option as _time


@click.command("status", cls=QueueFirst)
@click.argument("queues", nargs=-1)
@floor_option
@json_option
def status_cmd(queues: tuple[str, ...], floor_path: str, as_json: bool) -> None:
    """What the floor holds per queue: checkpoint, counts, slices not yet uploaded."""
    with existing_floor(floor_path) as floor:
        names = queues or tuple(floor.queues())
        rows = [floor.status(q).to_dict() for q in names]
        gaps = [g for q in names for g in floor.gaps(q)]
    emit_rows(as_json, rows, f"floor {floor_path}")
    warn_gaps(gaps)


@click.command("audit", cls=QueueFirst)
@click.argument("queue")
@click.option("--outcome", type=click.Choice([o.value for o in Outcome]))
@click.option("--since", help="ms since the epoch or ISO 8601 (inclusive).")
@click.option("--until", help="ms since the epoch or ISO 8601 (exclusive).")
@click.option("--limit", type=click.IntRange(min=1), help="The most outcomes listed.")
@click.option("--quarantine", is_flag=True, help="Also list malformed entries.")
@floor_option
@json_option
def audit_cmd(queue: str, outcome: str | None, since: str | None, until: str | None,
              limit: int | None, quarantine: bool, floor_path: str, as_json: bool) -> None:
    """Every archived outcome of QUEUE in a time range, oldest first."""
    since_ms, until_ms = _time(since), _time(until)  # a bad time is refused before the floor
    with existing_floor(floor_path) as floor:
        found = floor.audit(queue, outcome, since_ms, until_ms, limit)
        kept = floor.quarantined(queue) if quarantine else []
    warn_gaps(found.gaps)
    if as_json:
        for line in iter_jsonl([*found, *kept]):
            click.echo(line)
        return
    audit_table([e.to_dict() for e in found], f"{queue}: {outcome or 'all'} outcomes")
    if quarantine:
        emit_rows(False, [q.to_dict() for q in kept], f"{queue}: quarantined")


@click.command("show", cls=QueueFirst)
@click.argument("queue")
@click.argument("job")
@floor_option
@json_option
@click.option("--tracebacks", is_flag=True,
              help="Print each failed attempt's traceback under its error (--json has them).")
def show_cmd(queue: str, job: str, floor_path: str, as_json: bool, tracebacks: bool) -> None:
    """What happened to JOB of QUEUE: every archived outcome, oldest first, with its
    failed attempts' errors (time, attempt, type, message) and its log lines."""
    with existing_floor(floor_path) as floor:
        entries = floor.history(queue, job)
    if as_json or not entries:
        emit_rows(as_json, [e.to_dict() for e in entries], f"{queue} job {job}")
    else:
        for entry in entries:
            row = {k: v for k, v in entry.to_dict().items() if k not in ("errors", "logs")}
            emit_rows(False, [row], f"{queue} job {job}")
            for line in debug_lines(entry.errors_value, entry.logs_value, tracebacks):
                click.echo(line)
    if not entries:
        sys.exit(1)


@click.command("ack-gap", cls=QueueFirst)
@click.argument("queue")
@click.option("--by", help="Who acknowledges (default: $USER).")
@click.option("--note", default="", help="Why the loss is accepted (kept in the floor).")
@floor_option
@json_option
def ack_gap_cmd(queue: str, by: str | None, note: str, floor_path: str, as_json: bool
                ) -> None:
    """Accept the stream entries QUEUE lost before the floor took them, so folds go on.

    The gap stays recorded (status, audit and verify keep showing it as acknowledged)."""
    done: list[Gap] = []

    def run() -> None:
        with existing_floor(floor_path) as floor:
            done.extend(floor.acknowledge_gaps(queue, by or os.environ.get("USER") or "unknown",
                                               note))

    guard(run)
    if not done:
        click.echo(f"{queue}: no open gap in the floor at {floor_path}", err=True)
        sys.exit(1)
    emit_rows(as_json, [g.to_dict() for g in done], f"{queue}: acknowledged")
