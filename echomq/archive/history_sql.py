"""SQL over the floor's history: a typed ``outcomes`` view for DuckDB, and exports.

The floor's entries are streamed, in stream order and in batches, into Arrow columns; the
view types them (``at``, ``created_at`` and ``started_at`` are UTC timestamps, ``attempts``
an integer) so a query never parses a stream entry. DuckDB and pyarrow are the optional
extra ``sql`` (``pip install 'echomq[sql]'``): nothing here is imported by a fold.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from echomq.archive.entries import to_ms
from echomq.errors import ExtraMissing, InvalidArgument, QueryFailed
from echomq.progress import Tick

if TYPE_CHECKING:
    from echomq.archive.floor import Floor

BATCH = 65_536
"""Entries per Arrow record batch: large enough for columnar speed, small enough that an
export holds little in memory."""

COLUMNS = ("queue", "job_id", "outcome", "result", "attempts", "at", "created_at",
           "started_at", "error", "name", "payload", "stream_id")
"""The view's columns, in order (the same in every export)."""

VIEW = """CREATE VIEW outcomes AS SELECT queue, job_id, outcome, result, attempts,
  CAST("at" AS TIMESTAMP) AS "at", CAST(created_at AS TIMESTAMP) AS created_at,
  CAST(started_at AS TIMESTAMP) AS started_at, error, name, payload, stream_id,
  CAST("at" AS TIMESTAMP) AS settled_at FROM outcome_rows"""
"""The typed view: times are TIMESTAMP (UTC, no zone: DuckDB needs pytz to hand out zoned
values). ``at`` is a keyword in recent DuckDB (write ``"at"``), so ``settled_at`` repeats
it under a name that needs no quotes."""


def _need(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ExtraMissing(f"{module} is not installed: pip install 'echomq[sql]' for "
                           "Floor.query and Floor.export") from exc


def _schema(pa: Any) -> Any:
    ts = pa.timestamp("ms", tz="UTC")
    return pa.schema([("queue", pa.string()), ("job_id", pa.string()),
                      ("outcome", pa.string()), ("result", pa.string()),
                      ("attempts", pa.int64()), ("at", ts), ("created_at", ts),
                      ("started_at", ts), ("error", pa.string()), ("name", pa.string()),
                      ("payload", pa.string()), ("stream_id", pa.string())])


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def rows(floor: Floor, queues: Iterable[str], since: int | None = None,
         until: int | None = None, batch: int = BATCH, progress: Tick | None = None
         ) -> Iterator[list[list[Any]]]:
    """The view's columns for ``since <= at < until``, ``batch`` entries at a time;
    ``progress`` is told how many entries were read (every ``batch``)."""
    loads = orjson.loads
    for queue in queues:
        cols: list[list[Any]] = [[] for _ in COLUMNS]
        (q, job, outcome, result, attempts, at, created, started, error, name, payload,
         sid) = cols
        lines = floor.lines(queue)
        for line in lines if progress is None else _ticking(lines, progress, batch):
            obj = loads(line)
            f = obj["fields"]
            when = int(f["at"])
            if (since is not None and when < since) or (until is not None and when >= until):
                continue
            q.append(queue)
            job.append(f["job"])
            outcome.append(f["outcome"])
            text = f.get("result", "")
            result.append(text)
            attempts.append(int(f["attempts"]))
            at.append(when)
            created.append(_int(f.get("created_at")))
            started.append(_int(f.get("started_at")))
            error.append(text if f["outcome"] == "dead" else None)
            name.append(f.get("name"))
            payload.append(f.get("payload"))
            sid.append(obj["id"])
            if len(sid) >= batch:
                yield cols
                cols = [[] for _ in COLUMNS]
                (q, job, outcome, result, attempts, at, created, started, error, name,
                 payload, sid) = cols
        if cols[0]:
            yield cols


def _ticking(lines: Iterator[bytes], progress: Tick, every: int) -> Iterator[bytes]:
    """``lines``, telling ``progress`` every ``every`` lines (and the rest at the end)."""
    n = 0
    for line in lines:
        yield line
        n += 1
        if n == every:
            progress(n)
            n = 0
    if n:
        progress(n)


def _batches(floor: Floor, queues: Iterable[str], since: int | None, until: int | None,
             progress: Tick | None = None) -> tuple[Any, Iterator[Any]]:
    pa = _need("pyarrow")
    schema = _schema(pa)
    return schema, (pa.RecordBatch.from_arrays(
        [pa.array(col, type=field.type) for col, field in zip(cols, schema, strict=True)],
        schema=schema) for cols in rows(floor, queues, since, until, progress=progress))


@dataclass(frozen=True)
class QueryResult:
    """A query's answer: its column names and rows (DuckDB's Python values)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def query(floor: Floor, sql: str, progress: Tick | None = None) -> QueryResult:
    """Run ``sql`` over the view ``outcomes`` of every queue in the floor (DuckDB);
    ``progress`` is told how many entries were read into the view.

    The view is built per call from the floor's entries; a query that DuckDB refuses
    raises :class:`QueryFailed` with DuckDB's message."""
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidArgument("a query is a non-empty SQL string")
    duckdb = _need("duckdb")
    pa = _need("pyarrow")
    schema, batches = _batches(floor, floor.queues(), None, None, progress)
    table = pa.Table.from_batches(list(batches), schema=schema)
    db = duckdb.connect(":memory:")
    try:
        db.register("outcome_rows", table)
        db.execute("SET TimeZone = 'UTC'")
        db.execute(VIEW)
        try:
            cursor = db.execute(sql)
            columns = [d[0] for d in cursor.description or ()]
            return QueryResult(columns, [tuple(row) for row in cursor.fetchall()])
        except duckdb.Error as exc:
            raise QueryFailed(f"the query failed: {exc}") from exc
    finally:
        db.close()


def export(floor: Floor, queue: str, path: str | os.PathLike[str], format: str = "parquet",
           since: int | datetime | None = None, until: int | datetime | None = None,
           progress: Tick | None = None) -> int:
    """Write ``queue``'s outcomes settled at ``since <= at < until`` to ``path`` as Parquet
    (the view's typed columns) or JSON lines (the same columns; times as ms since the
    epoch); returns how many rows were written. ``progress`` is told how many of the
    queue's entries were read."""
    if format not in ("parquet", "jsonl"):
        raise InvalidArgument(f"format must be 'parquet' or 'jsonl', got {format!r}")
    if queue not in floor.queues():
        raise InvalidArgument(f"the floor holds no queue {queue!r}")
    lo, hi = to_ms(since), to_ms(until)
    target = Path(path)
    count = 0
    if format == "jsonl":
        with target.open("w", encoding="utf-8") as out:
            for cols in rows(floor, [queue], lo, hi, progress=progress):
                for row in zip(*cols, strict=True):
                    out.write(json.dumps(dict(zip(COLUMNS, row, strict=True)),
                                         ensure_ascii=False, separators=(",", ":")))
                    out.write("\n")
                    count += 1
        return count
    parquet = _need("pyarrow.parquet")
    schema, batches = _batches(floor, [queue], lo, hi, progress)
    with parquet.ParquetWriter(str(target), schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
            count += batch.num_rows
    return count
