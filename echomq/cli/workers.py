"""``emq workers``: the workers of the prefix that beat lately, from their heartbeat
records (alive, or gone: killed without a stop, until the record lapses)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

import echomq
from echomq.cli.app import as_click_error, connect, emit
from echomq.records import WorkerInfo


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _row(w: WorkerInfo) -> dict[str, Any]:
    return {"id": w.id, "kind": w.kind, "host": w.host, "pid": w.pid,
            "parent_pid": w.parent_pid, "queues": list(w.queues), "tasks": list(w.tasks),
            "concurrency": w.concurrency, "held": w.held_count,
            "held_jobs": [[h.queue, h.id] for h in w.held], "started": _when(w.started_at),
            "last_beat": _when(w.last_beat_at), "version": w.version,
            "status": "alive" if w.alive else "gone"}


@click.command()
@click.option("--queue", "-q", default=None, help="Only the workers serving this queue.")
@click.option("--json", "as_json", is_flag=True, help="One JSON array (times ISO 8601 UTC).")
@click.pass_context
def workers(ctx: click.Context, queue: str | None, as_json: bool) -> None:
    """List the workers that beat lately: host, pid, kind, queues, concurrency, jobs
    held, last beat, alive or gone (silent for 3 beats: killed, or its host lost)."""
    conn = connect(ctx, start=False)
    with as_click_error():
        found = echomq.workers(conn, queue)
    if as_json:
        emit([_row(w) for w in found], True)
        return
    if not found:
        click.echo("no worker beat lately")
    for w in found:
        click.echo(f"{w.host}\tpid {w.pid}\t{w.kind}\t{','.join(w.queues)}\tconcurrency "
                   f"{w.concurrency}\theld {w.held_count}\tlast beat {w.silent_ms / 1000:.1f}s"
                   f" ago\t{'alive' if w.alive else 'gone'}")
