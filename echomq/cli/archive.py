"""``emq archive ...``: fold, status, audit, show, restore, verify, ack-gap, replay, query,
export, prune, compact (and declare).

Every command takes the floor path and the remote's settings as options, each with an
environment variable, so a deployment sets ``EMQ_FLOOR`` and ``EMQ_S3_*`` once. ``--json``
prints machine-readable output (JSON lines for audits) for scripts. The commands that
reach Redis use the root's ``--url``, ``--data-dir`` and ``--executor`` (their own
``--url`` overrides the root's), through the one options context.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import click
import redis
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from echomq.archive.driver import Driver
from echomq.archive.entries import Outcome, iter_jsonl
from echomq.archive.floor import Floor
from echomq.archive.floor_gaps import Gap
from echomq.archive.report import FoldReport
from echomq.archive.restore import restore, verify
from echomq.cli.app import Group, connect
from echomq.cli.remote import RemoteSettings, remote_options
from echomq.cli.text import debug_lines, human, human_row
from echomq.cli.text import time_option as _time
from echomq.errors import EchoMQError, LeaseHeld
from echomq.progress import Task, Tick, bars
from echomq.queue.connection import Connection
from echomq.queue.declared import declare, declared_queues, undeclare

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_FLOOR = "./.echomq/floor"


def _floor_option(fn: F) -> F:
    return click.option("--floor", "floor_path", default=DEFAULT_FLOOR, envvar="EMQ_FLOOR",
                        show_default=True, help="The LMDB floor directory.")(fn)


def _json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="Machine-readable output (times in ms since the epoch).")(fn)


def _url_option(fn: F) -> F:
    return click.option("--url", envvar=["EMQ_URL", "EMQ_REDIS_URL"],
                        help="Redis/Valkey URL (default: the root's --url, else the "
                             "embedded server of --data-dir).")(fn)


def _existing_floor(floor_path: str) -> Floor:
    """The floor at ``floor_path`` for a command that only reads it: one that is not
    there is refused, never created (a typo must not leave an empty floor behind)."""
    if not Path(floor_path, "data.mdb").exists():
        raise click.ClickException(f"no floor at {floor_path} (no data.mdb there)")
    return Floor(floor_path)


def _emit(as_json: bool, rows: list[dict[str, Any]], title: str) -> None:
    """Rows as JSON lines (times in ms since the epoch), or as a table for people (times
    as ISO 8601 UTC, structured values as JSON: :mod:`echomq.cli.text`)."""
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
        return
    if not rows:
        Console().print(f"{title}: nothing")
        return
    rows = [human_row(row) for row in rows]
    if len(rows[0]) > 6:  # wide records read better as one field per line
        for row in rows:
            table = Table(title=title, show_header=False)
            table.add_column("field", style="bold")
            table.add_column("value", overflow="fold")
            for name, value in row.items():
                table.add_row(name, escape(value))
            Console().print(table)
        return
    table = Table(title=title)
    for name in rows[0]:
        table.add_column(name, overflow="fold")  # wrap, never cut an id or a name
    for row in rows:
        table.add_row(*(escape(v) for v in row.values()))
    Console().print(table)


AUDIT_COLUMNS = ("at", "job_id", "outcome", "attempts", "result")
"""What a row of ``emq archive audit`` shows (``--json`` has every field)."""


def _audit_table(rows: list[dict[str, Any]], title: str) -> None:
    """Outcomes as one table, a row each: when, which job, how it ended, after how many
    attempts, and the first line of its result or error."""
    if not rows:
        Console().print(f"{title}: nothing")
        return
    table = Table(title=title)
    for name in AUDIT_COLUMNS:
        table.add_column(name, overflow="fold", no_wrap=name == "at")
    for row in rows:
        result = human(row.get("result"))
        first = result.strip().splitlines()[0] if result.strip() else result
        cells = {**{k: human(row.get(k), k) for k in AUDIT_COLUMNS},
                 "result": first + (" ..." if first != result.strip() else "")}
        table.add_row(*(escape(cells[k]) for k in AUDIT_COLUMNS))
    Console().print(table)


def _warn_gaps(gaps: list[Gap] | tuple[Gap, ...]) -> None:
    """Say on stderr what history the floor knows it lacks (stdout stays parseable)."""
    for gap in gaps:
        click.echo(f"GAP: {gap.describe()}", err=True)


def _floor_gaps(floor_path: str) -> dict[str, list[Gap]] | None:
    """Every queue's gaps in the floor at ``floor_path``, or None when there is no floor."""
    if not Path(floor_path, "data.mdb").exists():
        return None
    with Floor(floor_path) as floor:
        return {q: floor.gaps(q) for q in floor.queues()}


def _guard(fn: Callable[[], None]) -> None:
    try:
        fn()
    except EchoMQError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc


@click.group("archive", cls=Group)
def archive() -> None:
    """The outcome archive: fold streams into the floor and S3; audit and restore."""


@archive.command("declare")
@click.argument("queues", nargs=-1, required=True)
@_url_option
@click.option("--record", type=click.Choice(["remote", "floor"]),
              help="Name the archive of record: the remote (--bucket...) or the floor "
                   "(--floor). Only a driver writing to it trims. Default: unchanged; "
                   "unset, the first driver WITH A REMOTE that trims claims it (a "
                   "floor-only driver only with --claim-record).")
@click.option("--payload/--no-payload", default=None,
              help="Also record each job's name and payload with its outcome (what "
                   "`emq archive replay` needs; off unless asked). Default: unchanged.")
@_floor_option
@remote_options
@click.pass_context
def declare_cmd(ctx: click.Context, queues: tuple[str, ...], url: str | None,
                record: str | None, payload: bool | None, floor_path: str,
                s3: RemoteSettings) -> None:
    """Record every outcome of QUEUES (dead-letters too) and archive their streams."""
    conn = connect(ctx, url)
    target: Any = None
    if record == "remote":
        target = s3.need()
    elif record == "floor":
        target = Floor(floor_path)
    try:
        for queue in queues:
            _guard(partial(declare, conn, queue, target, payload=payload))
    finally:
        if isinstance(target, Floor):
            target.close()


@archive.command("undeclare")
@click.argument("queues", nargs=-1, required=True)
@_url_option
@click.pass_context
def undeclare_cmd(ctx: click.Context, queues: tuple[str, ...], url: str | None) -> None:
    """Stop archiving QUEUES (nothing archived is removed)."""
    conn = connect(ctx, url)
    for queue in queues:
        _guard(partial(undeclare, conn, queue))


@archive.command("fold")
@click.argument("queues", nargs=-1)
@_url_option
@_floor_option
@remote_options
@click.option("--slice-count", type=click.IntRange(min=1), default=5000, show_default=True,
              help="Stream entries per slice at most.")
@click.option("--claim-record", is_flag=True,
              help="Make this floor (or the remote, with --bucket) the archive of record "
                   "of a queue that has none, so this fold trims the stream. Without a "
                   "remote and without this flag, such a queue is folded into the floor "
                   "and NOT trimmed (the stream keeps every entry for the deployment's "
                   "own archive).")
@_json_option
@click.pass_context
def fold_cmd(ctx: click.Context, queues: tuple[str, ...], url: str | None, floor_path: str,
             s3: RemoteSettings, slice_count: int, claim_record: bool, as_json: bool) -> None:
    """Fold QUEUES (default: every declared queue) into the floor and the remote.

    Only the archive of record's driver trims the stream. A queue that has none
    (`emq archive declare Q --record floor|remote` names it) is claimed by a fold with a
    remote (--bucket) or with --claim-record; a floor-only fold without the flag folds
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
                            claim_record=True if claim_record else None)
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
        _guard(partial(run, task))
    _emit(as_json, [r.to_dict() for r in reports], "fold")
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


@archive.command("status")
@click.argument("queues", nargs=-1)
@_floor_option
@_json_option
def status_cmd(queues: tuple[str, ...], floor_path: str, as_json: bool) -> None:
    """What the floor holds per queue: checkpoint, counts, slices not yet uploaded."""
    with _existing_floor(floor_path) as floor:
        names = queues or tuple(floor.queues())
        rows = [floor.status(q).to_dict() for q in names]
        gaps = [g for q in names for g in floor.gaps(q)]
    _emit(as_json, rows, f"floor {floor_path}")
    _warn_gaps(gaps)


@archive.command("audit")
@click.argument("queue")
@click.option("--outcome", type=click.Choice([o.value for o in Outcome]))
@click.option("--since", help="ms since the epoch or ISO 8601 (inclusive).")
@click.option("--until", help="ms since the epoch or ISO 8601 (exclusive).")
@click.option("--limit", type=click.IntRange(min=1), help="The most outcomes listed.")
@click.option("--quarantine", is_flag=True, help="Also list malformed entries.")
@_floor_option
@_json_option
def audit_cmd(queue: str, outcome: str | None, since: str | None, until: str | None,
              limit: int | None, quarantine: bool, floor_path: str, as_json: bool) -> None:
    """Every archived outcome of QUEUE in a time range, oldest first."""
    since_ms, until_ms = _time(since), _time(until)  # a bad time is refused before the floor
    with _existing_floor(floor_path) as floor:
        found = floor.audit(queue, outcome, since_ms, until_ms, limit)
        kept = floor.quarantined(queue) if quarantine else []
    _warn_gaps(found.gaps)
    if as_json:
        for line in iter_jsonl([*found, *kept]):
            click.echo(line)
        return
    _audit_table([e.to_dict() for e in found], f"{queue}: {outcome or 'all'} outcomes")
    if quarantine:
        _emit(False, [q.to_dict() for q in kept], f"{queue}: quarantined")


@archive.command("show")
@click.argument("queue")
@click.argument("job")
@_floor_option
@_json_option
@click.option("--tracebacks", is_flag=True,
              help="Print each failed attempt's traceback under its error (--json has them).")
def show_cmd(queue: str, job: str, floor_path: str, as_json: bool, tracebacks: bool) -> None:
    """What happened to JOB of QUEUE: every archived outcome, oldest first, with its
    failed attempts' errors (time, attempt, type, message) and its log lines."""
    with _existing_floor(floor_path) as floor:
        entries = floor.history(queue, job)
    if as_json or not entries:
        _emit(as_json, [e.to_dict() for e in entries], f"{queue} job {job}")
    else:
        for entry in entries:
            row = {k: v for k, v in entry.to_dict().items() if k not in ("errors", "logs")}
            _emit(False, [row], f"{queue} job {job}")
            for line in debug_lines(entry.errors_value, entry.logs_value, tracebacks):
                click.echo(line)
    if not entries:
        sys.exit(1)


_rebuild_option = click.option(
    "--rebuild-manifest", is_flag=True,
    help="A queue with slices but no manifest: follow the chain of slices alone (its "
         "newest history may have been cut; the report says the head found).")


@archive.command("restore")
@click.option("-q", "--queue", "queues", multiple=True, help="Only these queues (repeatable).")
@_floor_option
@remote_options
@_rebuild_option
@click.option("--until", help="A point in time: keep exactly the outcomes recorded up to it "
                              "(a stream id ms-seq, inclusive; or ms since the epoch or ISO "
                              "8601: that millisecond included). Restore into a fresh path.")
@_json_option
def restore_cmd(queues: tuple[str, ...], floor_path: str, s3: RemoteSettings,
                rebuild_manifest: bool, until: str | None, as_json: bool) -> None:
    """Rebuild the floor from the remote alone, verified (resumes when interrupted); with
    --until, as it was at that point, verified along the chain up to it.

    Refuses a missing or corrupt slice, a broken chain and (unless --rebuild-manifest) a
    bucket with slices but no manifest; with --until, only those up to the point."""
    remote = s3.need()
    point: int | str | None = until
    if until is not None and not re.fullmatch(r"[0-9]+-[0-9]+", until):
        point = _time(until)  # ms or ISO 8601; a stream id goes as it is
    out: dict[str, Any] = {}
    _guard(lambda: out.update(restore(remote, floor_path, list(queues) or None,
                                      progress=None if not as_json else False,
                                      rebuild_manifest=rebuild_manifest, until=point)))
    _emit(as_json, [r.to_dict() for r in out.values()], "restore")


@archive.command("verify")
@click.option("-q", "--queue", "queues", multiple=True, help="Only these queues (repeatable).")
@remote_options
@_floor_option
@click.option("--pin", "pins", multiple=True, metavar="QUEUE=DIGEST",
              help="A head_digest kept from an earlier report; it must still be on QUEUE's "
                   "chain (repeatable).")
@_rebuild_option
@_json_option
def verify_cmd(queues: tuple[str, ...], s3: RemoteSettings, floor_path: str,
               pins: tuple[str, ...], rebuild_manifest: bool, as_json: bool) -> None:
    """Check every slice's checksum and digest, and that each queue's chain is whole; with
    a floor (--floor, when it exists) also that the bucket holds every slice it uploaded,
    and list the stream losses the floor recorded. Exits 1 on a loss not acknowledged."""
    for pin in pins:
        if not all(pin.partition("=")[::2]):
            raise click.BadParameter(f"{pin!r} is not QUEUE=DIGEST", param_hint="--pin")
    remote = s3.need()
    kept = dict(pin.partition("=")[::2] for pin in pins)
    against = floor_path if Path(floor_path, "data.mdb").exists() else None
    out: dict[str, Any] = {}
    _guard(lambda: out.update(verify(remote, list(queues) or None,
                                     progress=None if not as_json else False,
                                     floor=against, rebuild_manifest=rebuild_manifest,
                                     pins=kept)))
    gaps = _floor_gaps(floor_path) or {}
    rows = []
    for name, report in out.items():
        row = report.to_dict()
        row["gaps"] = len([g for g in gaps.get(name, ()) if not g.acknowledged])
        row["gaps_acknowledged"] = len([g for g in gaps.get(name, ()) if g.acknowledged])
        rows.append(row)
    _emit(as_json, rows, "verify")
    shown = [g for name in out for g in gaps.get(name, ())]
    _warn_gaps(shown)
    if any(not g.acknowledged for g in shown):
        sys.exit(1)


@archive.command("ack-gap")
@click.argument("queue")
@click.option("--by", help="Who acknowledges (default: $USER).")
@click.option("--note", default="", help="Why the loss is accepted (kept in the floor).")
@_floor_option
@_json_option
def ack_gap_cmd(queue: str, by: str | None, note: str, floor_path: str, as_json: bool
                ) -> None:
    """Accept the stream entries QUEUE lost before the floor took them, so folds go on.

    The gap stays recorded (status, audit and verify keep showing it as acknowledged)."""
    done: list[Gap] = []

    def run() -> None:
        with _existing_floor(floor_path) as floor:
            done.extend(floor.acknowledge_gaps(queue, by or os.environ.get("USER") or "unknown",
                                               note))

    _guard(run)
    if not done:
        click.echo(f"{queue}: no open gap in the floor at {floor_path}", err=True)
        sys.exit(1)
    _emit(as_json, [g.to_dict() for g in done], f"{queue}: acknowledged")


from echomq.cli.archive_prune import compact_cmd, prune_cmd  # noqa: E402 (this group's)
from echomq.cli.archive_query import export_cmd, query_cmd  # noqa: E402 (this group's)
from echomq.cli.archive_replay import replay_cmd  # noqa: E402 (a command of this group)

for _command in (replay_cmd, query_cmd, export_cmd, prune_cmd, compact_cmd):
    archive.add_command(_command)

archive_cli = archive
