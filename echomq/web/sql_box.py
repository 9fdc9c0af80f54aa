"""The dashboard's SQL box: a read-only query over the floor's ``outcomes`` view.

It is :func:`echomq.archive.history_sql.query` run locked down (no file read or written,
no database attached, no extension installed or loaded, no setting changed back), with a
time limit (:data:`TIMEOUT_S`, DuckDB interrupted from a timer), a row limit
(:data:`MAX_ROWS`, the answer says it was cut) and a memory cap, one query at a time per
dashboard. The page offers it only to visitors who gave the token, never in read-only
mode; it is a POST with the CSRF token.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from echomq.errors import EchoMQError

if TYPE_CHECKING:
    from echomq.archive.floor import Floor

TIMEOUT_S = 5.0
"""A query still running after this is interrupted."""
MAX_ROWS = 1000
"""The most rows shown; a longer answer says it was cut."""
MAX_SQL = 10_000
"""The longest query text taken."""
MEMORY_MB = 512
"""DuckDB's memory limit for one query."""
CELL = 500
"""Characters of one value shown."""

_busy = threading.Lock()


@dataclass
class SqlAnswer:
    """What the box shows: the columns and rows as text, or the refusal."""

    sql: str
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    truncated: bool = False
    error: str | None = None


def _text(value: Any) -> str:
    if value is None:
        return "NULL"
    text = str(value)
    return text if len(text) <= CELL else text[:CELL] + "…"


def run(floor: Floor, sql: str) -> SqlAnswer:
    """Run ``sql`` under the limits; a refusal or a failure comes back as ``error``."""
    from echomq.archive import history_sql

    answer = SqlAnswer(sql)
    if not sql.strip():
        answer.error = "write a query, e.g. SELECT outcome, count(*) FROM outcomes GROUP BY 1"
        return answer
    if len(sql) > MAX_SQL:
        answer.error = f"a query is at most {MAX_SQL} characters"
        return answer
    if not _busy.acquire(blocking=False):
        answer.error = "another query is running on this dashboard: try again in a moment"
        return answer
    try:
        found = history_sql.query(floor, sql, max_rows=MAX_ROWS, timeout_s=TIMEOUT_S,
                                  memory_mb=MEMORY_MB)
    except EchoMQError as exc:
        answer.error = str(exc)
        return answer
    finally:
        _busy.release()
    answer.columns = list(found.columns)
    answer.rows = [[_text(v) for v in row] for row in found.rows]
    answer.truncated = found.truncated
    return answer
