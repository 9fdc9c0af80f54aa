"""``emq archive query`` and ``emq archive export``: SQL over the floor's history
(DuckDB, the extra ``echomq[sql]``) and exports for a warehouse."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from echomq.archive.floor import Floor
from echomq.cli.app import as_click_error, emit
from echomq.cli.archive_options import QueueFirst
from echomq.cli.text import time_option as _time
from echomq.progress import bars

DEFAULT_FLOOR = "./.echomq/floor"


def _floor(floor_path: str) -> Floor:
    if not Path(floor_path, "data.mdb").exists():
        raise click.ClickException(f"no floor at {floor_path}")
    return Floor(floor_path)


@click.command("query")
@click.argument("sql")
@click.option("--floor", "floor_path", default=DEFAULT_FLOOR, envvar="EMQ_FLOOR",
              show_default=True, help="The LMDB floor directory.")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per row (times as ISO 8601 UTC).")
@click.option("--external-access", is_flag=True,
              help="Let the SQL read and write files (COPY ... TO), attach databases and "
                   "load extensions (off by default: such SQL would act with your rights).")
def query_cmd(sql: str, floor_path: str, as_json: bool, external_access: bool) -> None:
    """Run SQL (DuckDB) over the view `outcomes` of the floor's history: queue, job_id,
    outcome, result, attempts, at, created_at, started_at (UTC timestamps), error (a dead
    outcome's result), name and payload (when recorded), stream_id.

    The SQL reaches nothing else: no file is read or written, no database attached, no
    extension loaded, no setting changed, unless --external-access is given (for your own
    COPY ... TO; `emq archive export` writes Parquet or JSON lines without it). Refuses a
    missing floor, SQL that DuckDB rejects (QueryFailed), and runs only with the extra
    installed: pip install 'echomq[sql]'. Shows a progress bar of the entries read on a
    terminal (on stderr; none with --json)."""
    with as_click_error(), _floor(floor_path) as floor, \
            bars(False if as_json else None, "query") as task:
        tick = task("", sum(floor.status(q).entries for q in floor.queues()))
        answer = floor.query(sql, external_access=external_access, progress=tick)
    if as_json:
        for row in answer.to_dicts():
            click.echo(json.dumps(row, default=_jsonable, ensure_ascii=False,
                                  separators=(",", ":")))
        return
    table = Table()
    for column in answer.columns:
        table.add_column(column, overflow="fold")
    for values in answer.rows:
        table.add_row(*("" if v is None else str(v) for v in values))
    Console().print(table)


def _jsonable(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


@click.command("export", cls=QueueFirst)
@click.argument("queue")
@click.argument("path")
@click.option("--format", "fmt", type=click.Choice(["parquet", "jsonl"]), default="parquet",
              show_default=True)
@click.option("--since", help="ms since the epoch or ISO 8601 (inclusive).")
@click.option("--until", help="ms since the epoch or ISO 8601 (exclusive).")
@click.option("--floor", "floor_path", default=DEFAULT_FLOOR, envvar="EMQ_FLOOR",
              show_default=True, help="The LMDB floor directory.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def export_cmd(queue: str, path: str, fmt: str, since: str | None, until: str | None,
               floor_path: str, as_json: bool) -> None:
    """Write QUEUE's archived outcomes (the query view's columns) to PATH as Parquet or
    JSON lines, for a warehouse.

    Refuses a missing floor or a queue it does not hold; Parquet needs the extra
    echomq[sql]. Shows a progress bar of the entries read on a terminal (on stderr; none
    with --json)."""
    with as_click_error(), _floor(floor_path) as floor, \
            bars(False if as_json else None, "export") as task:
        total = floor.status(queue).entries if queue in floor.queues() else None
        count = floor.export(queue, path, fmt, _time(since), _time(until),
                             progress=task(queue, total))
    emit({"queue": queue, "path": path, "format": fmt, "rows": count}, as_json)
