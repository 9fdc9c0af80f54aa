"""``python bench/run.py [SECTION...]``: run the benchmarks (all sections by default) and print
one table."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))


SECTIONS = {
    "consumer": ("bench_consumer", "main"),
    "tasks": ("bench_tasks", "rows"),
    "history": ("bench_history", "rows"),
    "pipeline": ("bench_pipeline", "rows"),
    "processes": ("bench_processes", "rows"),
    "aio": ("bench_aio", "rows"),
    "archive": ("bench_archive", "rows"),
    "fold-parts": ("bench_fold_parts", "rows"),
    "restore-parts": ("bench_restore_parts", "rows"),
    "retention": ("bench_retention", "rows"),
    "drivers": ("bench_drivers", "rows"),
    "bulk": ("bench_bulk", "rows"),
    "metrics": ("bench_metrics", "rows"),
    "web": ("bench_web", "rows"),
    "scale": ("bench_scale", "rows"),
    "durable": ("bench_durable", "rows"),
    "instructions": ("bench_instructions", "rows"),
    "dedup": ("bench_dedup", "rows"),
    "flows": ("bench_flows", "rows"),
    "heartbeat": ("bench_heartbeat", "rows"),
    "coordination": ("bench_coordination", "rows"),
}
"""Every section: its module under bench/ and the function that yields (measure, value)."""


def main() -> None:
    which = sys.argv[1:] or list(SECTIONS)
    unknown = [name for name in which if name not in SECTIONS]
    if unknown:
        raise SystemExit(f"unknown section(s) {unknown}; choose from {list(SECTIONS)}")
    table = Table(title="EchoMQ benchmarks (medians of 3; same machine, same run)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name in which:
        module, function = SECTIONS[name]
        for measure, value in getattr(importlib.import_module(module), function)():
            table.add_row(measure, value)
    Console().print(table)


if __name__ == "__main__":
    main()
