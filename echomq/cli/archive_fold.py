"""``emq archive declare``, ``undeclare`` and ``fold``: the archive commands that reach
Redis, through the root's options context (their own ``--url`` overrides the root's)."""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

import click
import redis

from echomq.archive.driver import Driver
from echomq.archive.floor import Floor
from echomq.archive.report import FoldReport
from echomq.cli.app import connect
from echomq.cli.archive_options import QueueFirst, floor_option, guard, json_option, url_option
from echomq.cli.archive_output import emit_rows
from echomq.cli.remote import RemoteSettings, remote_options
from echomq.errors import EchoMQError, LeaseHeld
from echomq.progress import Task, Tick, bars
from echomq.queue.connection import Connection
from echomq.queue.declared import declare, declared_queues, undeclare


@click.command("declare", cls=QueueFirst)
@click.argument("queues", nargs=-1, required=True)
@url_option
@click.option("--custodian", type=click.Choice(["remote", "floor"]),
              help="Name the queue's custodian: the remote (--bucket...) or the floor "
                   "(--floor). Only a driver writing to it trims. Default: unchanged; "
                   "unset, the first driver WITH A REMOTE that trims claims custody (a "
                   "floor-only driver only with --claim-custody).")
@click.option("--payload/--no-payload", default=None,
              help="Also record each job's name and payload with its outcome (what "
                   "`emq archive replay` needs; off unless asked). Default: unchanged.")
@floor_option
@remote_options
@click.pass_context
def declare_cmd(ctx: click.Context, queues: tuple[str, ...], url: str | None,
                custodian: str | None, payload: bool | None, floor_path: str,
                s3: RemoteSettings) -> None:
    """Record every outcome of QUEUES (dead-letters too) and archive their streams."""
    conn = connect(ctx, url)
    target: Any = None
    if custodian == "remote":
        target = s3.need()
    elif custodian == "floor":
        target = Floor(floor_path)
    try:
        for queue in queues:
            guard(partial(declare, conn, queue, target, payload=payload))
    finally:
        if isinstance(target, Floor):
            target.close()


@click.command("undeclare", cls=QueueFirst)
@click.argument("queues", nargs=-1, required=True)
@url_option
@click.pass_context
def undeclare_cmd(ctx: click.Context, queues: tuple[str, ...], url: str | None) -> None:
    """Stop archiving QUEUES (nothing archived is removed)."""
    conn = connect(ctx, url)
    for queue in queues:
        guard(partial(undeclare, conn, queue))


@click.command("fold", cls=QueueFirst)
@click.argument("queues", nargs=-1)
@url_option
@floor_option
@remote_options
@click.option("--slice-count", type=click.IntRange(min=1), default=5000, show_default=True,
              help="Stream entries per slice at most.")
@click.option("--claim-custody", is_flag=True,
              help="Make this floor (or the remote, with --bucket) the custodian of a "
                   "queue that has none, so this fold trims the stream. Without a "
                   "remote and without this flag, such a queue is folded into the floor "
                   "and NOT trimmed (the stream keeps every entry for the deployment's "
                   "own archive).")
@json_option
@click.pass_context
def fold_cmd(ctx: click.Context, queues: tuple[str, ...], url: str | None, floor_path: str,
             s3: RemoteSettings, slice_count: int, claim_custody: bool, as_json: bool) -> None:
    """Fold QUEUES (default: every declared queue) into the floor and the remote.

    Only the custodian's driver trims the stream. A queue that has none
    (`emq archive declare Q --custodian floor|remote` names it) is claimed by a fold with
    a remote (--bucket) or with --claim-custody; a floor-only fold without the flag folds
    a copy into its floor and trims nothing, so a one-off fold never takes a stream
    from the deployment's archive. Each untrimmed queue is named on stderr.

    A queue whose fold lease another driver holds is skipped at once, never waited for,
    and named with its holder (not a failure). Exits 1 when any fold failed. Shows a
    progress bar per queue on a terminal (on stderr; none with --json)."""
    conn = connect(ctx, url)
    remote = s3.build()
    reports: list[FoldReport] = []

    names = queues or tuple(declared_queues(conn))
    ticks: dict[str, Tick] = {}

    def run(task: Task) -> None:
        try:
            driver = Driver(conn, floor_path, remote, slice_count=slice_count,
                            progress=lambda queue, n: ticks[queue](n),
                            claim_custody=True if claim_custody else None)
        except EchoMQError as exc:  # the floor cannot open: every queue failed
            reports.extend(FoldReport(q, error=repr(exc)) for q in names)
            return
        try:
            for queue in names:
                ticks[queue] = task(queue, _backlog(conn, queue))
                try:
                    reports.append(driver.fold(queue))
                except LeaseHeld:
                    reports.append(FoldReport(queue, skipped="another driver holds its "
                                              "fold lease", held_by=driver.lease_holder(queue)))
                except EchoMQError as exc:
                    reports.append(getattr(exc, "report", None)
                                   or FoldReport(queue, error=repr(exc)))
        finally:
            driver.close()

    with bars(False if as_json else None, "fold") as task:
        guard(partial(run, task))
    emit_rows(as_json, [r.to_dict() for r in reports], "fold")
    for report in reports:
        if report.skipped:
            click.echo(f"skipped {report.queue}: {report.skipped}"
                       + (f" ({report.held_by})" if report.held_by else ""), err=True)
        elif report.trim_refused:
            click.echo(f"not trimmed {report.queue}: {report.trim_refused}", err=True)
    failed = [r for r in reports if r.error]
    for report in failed:
        click.echo(f"fold of {report.queue} failed: {report.error}", err=True)
    if failed:
        click.echo(f"fold failed for {len(failed)} of {len(reports)} queue(s): "
                   + ", ".join(r.queue for r in failed), err=True)
        sys.exit(1)


def _backlog(conn: Connection, queue: str) -> int | None:
    """The stream's length: an upper bound of what a fold has to take (entries folded but
    not trimmed yet count too); None when it cannot be read (the fold will say why)."""
    try:
        return int(conn.redis.xlen(conn.keys(queue).completions))
    except (redis.RedisError, EchoMQError):
        return None
