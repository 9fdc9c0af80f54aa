"""``python bench/run.py [consumer|archive|retention]``: run the benchmarks and print one table."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    which = sys.argv[1:] or ["consumer", "archive"]
    table = Table(title="EchoMQ benchmarks (medians of 3; same machine, same run)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    if "consumer" in which:
        import bench_consumer

        for name, value in bench_consumer.main():
            table.add_row(name, value)
    if "archive" in which:
        import bench_archive

        for name, value in bench_archive.rows():
            table.add_row(name, value)
    if "retention" in which:
        import bench_retention

        for name, value in bench_retention.rows():
            table.add_row(name, value)
    Console().print(table)


if __name__ == "__main__":
    main()
