"""SQL over the floor's history: a typed ``outcomes`` view for DuckDB, and exports.

The floor's entries are streamed, in stream order and in batches, into one JSON-lines
file DuckDB loads itself; the view types them (``at``, ``created_at`` and ``started_at``
are UTC timestamps, ``attempts`` an integer) so a query never parses a stream entry. The
user's SQL then runs locked down (no files, no extensions, no settings) unless the caller
opts in. Parquet exports are DuckDB's own ``COPY``, on a path this module quotes. DuckDB
is the optional extra ``sql`` (``pip install 'echomq[sql]'``): nothing here is imported
by a fold.
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
import threading
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
"""Entries per batch of columns: a JSON-lines export holds little more in memory."""

COLUMNS = ("queue", "job_id", "outcome", "result", "attempts", "at", "created_at",
           "started_at", "error", "name", "payload", "stream_id", "errors", "logs")
"""The view's columns, in order (the same in every export). ``errors`` and ``logs`` are the
job's failed attempts' errors and its ``job.log`` lines, JSON text (an array) or NULL."""

VIEW = """CREATE VIEW outcomes AS SELECT queue, job_id, outcome, result, attempts,
  CAST("at" AS TIMESTAMP) AS "at", CAST(created_at AS TIMESTAMP) AS created_at,
  CAST(started_at AS TIMESTAMP) AS started_at, error, name, payload, stream_id,
  CAST("at" AS TIMESTAMP) AS settled_at, errors, logs FROM outcome_rows"""
"""The typed view: times are TIMESTAMP (UTC, no zone: DuckDB needs pytz to hand out zoned
values). ``at`` is a keyword in recent DuckDB (write ``"at"``), so ``settled_at`` repeats
it under a name that needs no quotes."""


def _need(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ExtraMissing(f"{module} is not installed: pip install 'echomq[sql]' for "
                           "Floor.query and Floor.export") from exc


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
         sid, errors, logs) = cols
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
            errors.append(f.get("errors"))
            logs.append(f.get("logs"))
            if len(sid) >= batch:
                yield cols
                cols = [[] for _ in COLUMNS]
                (q, job, outcome, result, attempts, at, created, started, error, name,
                 payload, sid, errors, logs) = cols
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


_LOAD = """INSERT INTO outcome_rows SELECT $queue, f.job, f.outcome,
  coalesce(f.result, ''), CAST(f.attempts AS BIGINT),
  CAST(epoch_ms(CAST(f."at" AS BIGINT)) AS TIMESTAMPTZ),
  CAST(epoch_ms(TRY_CAST(f.created_at AS BIGINT)) AS TIMESTAMPTZ),
  CAST(epoch_ms(TRY_CAST(f.started_at AS BIGINT)) AS TIMESTAMPTZ),
  CASE WHEN f.outcome = 'dead' THEN coalesce(f.result, '') END,
  f.name, f.payload, id, f.errors, f.logs
FROM (SELECT id, fields AS f FROM read_json($path, format = 'newline_delimited',
      maximum_object_size = 2147483647, columns = {id: 'VARCHAR', fields: 'STRUCT(
        job VARCHAR, outcome VARCHAR, result VARCHAR, attempts VARCHAR, "at" VARCHAR,
        created_at VARCHAR, started_at VARCHAR, name VARCHAR, payload VARCHAR,
        errors VARCHAR, logs VARCHAR)'}))
WHERE ($since IS NULL OR CAST(f."at" AS BIGINT) >= $since)
  AND ($until IS NULL OR CAST(f."at" AS BIGINT) < $until)"""
"""One queue's rows, from the floor's own stored lines (``{"id", "fields"}``) written to a
file DuckDB reads itself: the same typing as :func:`rows` (times become UTC timestamps,
a ``created_at`` that is not a number is NULL, ``error`` is a dead outcome's result)."""

_TABLE = ("CREATE TABLE outcome_rows (queue VARCHAR, job_id VARCHAR, outcome VARCHAR, "
          "result VARCHAR, attempts BIGINT, \"at\" TIMESTAMPTZ, created_at TIMESTAMPTZ, "
          "started_at TIMESTAMPTZ, error VARCHAR, name VARCHAR, payload VARCHAR, "
          "stream_id VARCHAR, errors VARCHAR, logs VARCHAR)")

_LOCKDOWN = ("SET enable_external_access = false", "SET autoinstall_known_extensions = false",
             "SET autoload_known_extensions = false", "SET allow_community_extensions = false",
             "SET lock_configuration = true")
"""Once the floor's rows are in: the SQL that follows reads no file, writes none, attaches
no database, installs or loads no extension, and cannot set any of it back."""


def _load(floor: Floor, queues: Iterable[str], since: int | None, until: int | None,
          progress: Tick | None = None) -> Any:
    """An in-memory DuckDB holding ``outcome_rows`` (the floor's rows, typed) and the view
    ``outcomes``. Each queue's stored lines go through a file in a private folder (0700),
    removed as soon as DuckDB has read them: DuckDB parses them faster than Python builds
    rows, and no columnar library (pyarrow, 170 MB) is needed. ``progress`` is told
    how many entries were read."""
    duckdb = _need("duckdb")
    with tempfile.TemporaryDirectory(prefix="emq-sql-") as folder:
        path = os.path.join(folder, "lines.jsonl")
        db = duckdb.connect(":memory:")
        try:
            db.execute("SET TimeZone = 'UTC'")
            db.execute(_TABLE)
            for queue in queues:
                lines = floor.lines(queue)
                if progress is not None:
                    lines = _ticking(lines, progress, 1000)
                with open(path, "wb") as out:
                    for line in lines:
                        out.write(line)
                        out.write(b"\n")
                db.execute(_LOAD, {"queue": queue, "path": path, "since": since,
                                   "until": until})
            db.execute(VIEW)
        except duckdb.Error as exc:  # an entry DuckDB cannot type: named, as a bad query is
            db.close()
            raise QueryFailed(f"the floor's history did not load into DuckDB: {exc}") from exc
        except BaseException:
            db.close()
            raise
    return db


@dataclass(frozen=True)
class QueryResult:
    """A query's answer: its column names and rows (DuckDB's Python values)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool = False
    """More rows than ``max_rows`` came back: ``rows`` holds the first ones."""

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def query(floor: Floor, sql: str, *, external_access: bool = False,
          progress: Tick | None = None, max_rows: int | None = None,
          timeout_s: float | None = None, memory_mb: int | None = None) -> QueryResult:
    """Run ``sql`` over the view ``outcomes`` of every queue in the floor (DuckDB);
    ``progress`` is told how many entries were read into the view. ``max_rows`` keeps
    the first rows (``truncated`` says more came), ``timeout_s`` interrupts the query
    (:class:`QueryFailed`) and ``memory_mb`` caps DuckDB's memory: the dashboard's SQL
    box runs someone else's query with all three.

    The view is built per call from the floor's entries. The SQL runs locked down unless
    ``external_access`` is True: no file is read or written (``read_csv``, ``COPY ... TO``),
    no database attached, no extension installed or loaded, and no setting changed (it
    runs with this process's rights, and a query string may come from someone else). A
    query that DuckDB refuses raises :class:`QueryFailed` with DuckDB's message."""
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidArgument("a query is a non-empty SQL string")
    duckdb = _need("duckdb")
    db = _load(floor, floor.queues(), None, None, progress)
    try:
        if memory_mb is not None:
            db.execute(f"SET memory_limit = '{int(memory_mb)}MB'")
        if not external_access:
            for statement in _LOCKDOWN:
                db.execute(statement)
        timer = threading.Timer(timeout_s, db.interrupt) if timeout_s is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            cursor = db.execute(sql)
            columns = [d[0] for d in cursor.description or ()]
            if max_rows is None:
                return QueryResult(columns, [tuple(row) for row in cursor.fetchall()])
            got = [tuple(row) for row in cursor.fetchmany(max_rows + 1)]
            return QueryResult(columns, got[:max_rows], truncated=len(got) > max_rows)
        except duckdb.InterruptException as exc:
            raise QueryFailed(f"the query ran past {timeout_s:g} s and was stopped") from exc
        except duckdb.Error as exc:
            raise QueryFailed(f"the query failed: {exc}") from exc
        finally:
            if timer is not None:
                timer.cancel()
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
    duckdb = _need("duckdb")
    db = _load(floor, [queue], lo, hi, progress)
    try:
        count = int(db.execute("SELECT count(*) FROM outcome_rows").fetchone()[0])
        # the path is quoted here, never part of any SQL a user wrote (COPY takes no
        # parameter for it); the columns as stored: times as UTC timestamps
        quoted = "'" + str(target).replace("'", "''") + "'"
        db.execute(f"COPY (SELECT * FROM outcome_rows) TO {quoted} (FORMAT parquet)")
    except duckdb.Error as exc:
        raise QueryFailed(f"the export to {target} failed: {exc}") from exc
    finally:
        db.close()
    return count
