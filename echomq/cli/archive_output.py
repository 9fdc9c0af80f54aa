"""How ``emq archive`` commands print: rows as JSON lines for scripts, or as tables for
people (times as ISO 8601 UTC, structured values as JSON), and the gaps a floor knows it
has on stderr, so stdout stays parseable."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from echomq.archive.floor_gaps import Gap
from echomq.cli.text import human, human_row


def emit_rows(as_json: bool, rows: list[dict[str, Any]], title: str) -> None:
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


def audit_table(rows: list[dict[str, Any]], title: str) -> None:
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


def warn_gaps(gaps: list[Gap] | tuple[Gap, ...]) -> None:
    """Say on stderr what history the floor knows it lacks (stdout stays parseable)."""
    for gap in gaps:
        click.echo(f"GAP: {gap.describe()}", err=True)
