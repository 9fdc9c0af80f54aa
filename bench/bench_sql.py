"""SQL over the archive: build a floor of N entries (commit_slice, no Redis), then time
Floor.query and Floor.export on it. Needs the extra echomq[sql].

    python bench/bench_sql.py [ENTRIES] [FOLDER]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from echomq.archive.entries import entry_line
from echomq.archive.floor import Floor
from echomq.archive.slices import RawItem, build_slice

QUEUE = "bench"
BASE_MS = 1_700_000_000_000


def build(floor: Floor, entries: int, step: int = 10_000) -> None:
    prev = "0-0"
    for start in range(0, entries, step):
        items: list[RawItem] = []
        for i in range(start, min(start + step, entries)):
            sid = f"{BASE_MS + i}-0"
            dead = i % 10 == 0
            fields = {"job": str(i), "outcome": "dead" if dead else "completed",
                      "result": "boom" if dead else '{"ok":true}', "attempts": "1",
                      "at": str(BASE_MS + i), "created_at": str(BASE_MS + i - 50),
                      "started_at": str(BASE_MS + i - 10), "name": "mail",
                      "payload": f'{{"to":"x@y","n":{i}}}'}
            items.append((sid, fields, entry_line(sid, fields)))
        floor.commit_slice(build_slice(QUEUE, prev, items, encode=False), uploaded=False,
                           keep_bytes=False)
        prev = items[-1][0]


def main() -> None:
    entries = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    folder = Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="emq-sql-"))
    with Floor(folder / "floor") as floor:
        started = time.perf_counter()
        build(floor, entries)
        print(f"built {entries:,} entries in {time.perf_counter() - started:.1f} s")
        for sql in ("SELECT outcome, count(*) FROM outcomes GROUP BY 1 ORDER BY 1",
                    "SELECT count(*), avg(epoch_ms(settled_at) - epoch_ms(started_at)) "
                    "FROM outcomes"):
            started = time.perf_counter()
            answer = floor.query(sql)
            took = time.perf_counter() - started
            print(f"query {took:.2f} s ({entries / took:,.0f} entries/s): {answer.rows}")
        for fmt in ("parquet", "jsonl"):
            out = folder / f"export.{fmt}"
            started = time.perf_counter()
            rows = floor.export(QUEUE, out, fmt)
            took = time.perf_counter() - started
            print(f"export {fmt}: {rows:,} rows in {took:.2f} s ({rows / took:,.0f}/s), "
                  f"{out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
