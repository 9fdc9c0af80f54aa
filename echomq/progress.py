"""Progress bars for long work (restore, verify, and the CLI's drain, obliterate, fold,
export and query): rich bars on stderr when it is a terminal, nothing otherwise.

One implementation for every caller, so each long command looks and behaves the same;
stdout stays for the result (a table, JSON lines), so a pipe or ``--json`` sees no bar.
rich is imported only when a bar is drawn.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Tick = Callable[[int], None]
"""Advance one bar by ``n`` units (slices, jobs, keys, entries)."""
Task = Callable[[str, int | None], Tick]
"""Add a bar named ``name`` with ``total`` units (None: not known ahead); its tick."""


def _silent(name: str, total: int | None) -> Tick:
    return lambda n: None


@contextmanager
def bars(enabled: bool | None, label: str) -> Iterator[Task]:
    """Bars labelled ``label`` on stderr when ``enabled`` (None: when stderr is a
    terminal); silent otherwise. A bar whose total was an estimate (or unknown) is shown
    complete when the work ends without an error."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield _silent
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress("[bold]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True)) as bar:

        def task(name: str, total: int | None) -> Tick:
            task_id = bar.add_task(f"{label} {name}".strip(), total=total)
            return lambda n: bar.advance(task_id, n)

        yield task
        for shown in bar.tasks:
            bar.update(shown.id, total=shown.completed)
