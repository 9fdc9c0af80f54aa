"""SQL over the archive's history (DuckDB over a typed view of a real floor) and exports
(Parquet written by DuckDB itself, JSON lines): what a user asks of history after Redis
forgot it. The user's SQL runs locked down: no file, no database, no extension."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import echomq
from echomq.archive import Driver, Floor, declare
from echomq.cli import main as emq
from echomq.errors import InvalidArgument, QueryFailed


def settle(conn: echomq.Connection, queue: str, done: int, dead: int) -> None:
    echomq.add_many(conn, queue, [{"n": i} for i in range(done)], name="ok")
    echomq.add_many(conn, queue, [{"d": i} for i in range(dead)], name="bad", max_attempts=1)
    for job in echomq.claim(conn, queue, lease_ms=10_000, count=done + dead):
        if "d" in job.payload:
            echomq.fail(conn, queue, job.id, job.token, f"broken {job.payload['d']}")
        else:
            echomq.complete(conn, queue, job.id, job.token, {"n": job.payload["n"]})


@pytest.fixture
def floor(rconn: echomq.Connection, queue: str, tmp_path: Path) -> Floor:
    """Two queues folded into one floor: ``queue`` records payloads, ``queue-b`` does not."""
    declare(rconn, queue, payload=True)
    declare(rconn, f"{queue}-b")
    settle(rconn, queue, 5, 2)
    settle(rconn, f"{queue}-b", 3, 0)
    path = tmp_path / "floor"
    for name in (queue, f"{queue}-b"):
        driver = Driver(rconn, path, slice_count=4)
        driver.fold(name)
        driver.close()
    return Floor(path)


def test_outcomes_by_queue(floor: Floor, queue: str) -> None:
    answer = floor.query("SELECT queue, outcome, count(*) AS n FROM outcomes "
                         "GROUP BY ALL ORDER BY queue, outcome")
    assert answer.columns == ["queue", "outcome", "n"]
    assert answer.rows == [(queue, "completed", 5), (queue, "dead", 2),
                           (f"{queue}-b", "completed", 3)]


def test_the_view_is_typed(floor: Floor, queue: str) -> None:
    [row] = floor.query(
        "SELECT job_id, outcome, result, attempts, \"at\", created_at, started_at, error, name, "
        f"payload, stream_id FROM outcomes WHERE queue = '{queue}' AND outcome = 'dead' "
        "ORDER BY settled_at, stream_id LIMIT 1").to_dicts()
    [entry] = floor.history(queue, row["job_id"])
    assert isinstance(row["at"], datetime) and isinstance(row["attempts"], int)
    assert row["at"].replace(tzinfo=UTC) == entry.at_datetime
    assert row["created_at"] <= row["started_at"] <= row["at"]
    assert row["at"] == floor.query("SELECT settled_at FROM outcomes WHERE stream_id = "
                                    f"'{entry.stream_id}'").rows[0][0]
    assert (row["outcome"], row["error"], row["result"], row["name"]) == (
        "dead", entry.result, entry.result, "bad")
    assert row["error"].startswith("broken") and json.loads(row["payload"]) == {
        "d": int(row["error"].split()[1])}
    assert row["stream_id"] == entry.stream_id
    nulls = floor.query("SELECT count(*) FROM outcomes WHERE outcome = 'completed' AND "
                        "error IS NULL GROUP BY queue ORDER BY 1").rows
    assert nulls == [(3,), (5,)]
    unrecorded = floor.query(f"SELECT count(payload), count(name), count(*) FROM outcomes "
                             f"WHERE queue = '{queue}-b'").rows
    assert unrecorded == [(0, 0, 3)]
    by_json = floor.query("SELECT sum(CAST(json_extract(payload, '$.n') AS INTEGER)) "
                          f"FROM outcomes WHERE queue = '{queue}'").rows
    assert by_json == [(0 + 1 + 2 + 3 + 4,)]


def test_bad_sql_is_refused(floor: Floor) -> None:
    with pytest.raises(QueryFailed, match="nosuch"):
        floor.query("SELECT nosuch FROM outcomes")
    with pytest.raises(InvalidArgument):
        floor.query("  ")


def test_an_empty_floor_answers_an_empty_view(tmp_path: Path) -> None:
    with Floor(tmp_path / "empty") as empty:
        assert empty.query("SELECT count(*) FROM outcomes").rows == [(0,)]


def test_export_parquet_and_jsonl(floor: Floor, queue: str, tmp_path: Path) -> None:
    everything = floor.audit(queue)
    assert floor.export(queue, tmp_path / "all.parquet") == 7
    # the Parquet holds exactly the JSON-lines rows (built in Python, as pyarrow was fed):
    # the same columns in the same order, times as UTC timestamps of the same millisecond
    floor.export(queue, tmp_path / "all.jsonl", format="jsonl")
    jsonl = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    with duckdb.connect() as db:
        db.execute("SET TimeZone = 'UTC'")
        parquet = db.execute(f"SELECT * FROM read_parquet('{tmp_path / 'all.parquet'}')")
        columns = [d[0] for d in parquet.description]
        back = [dict(zip(columns, row, strict=True)) for row in parquet.fetchall()]
        types = dict(db.execute("SELECT column_name, column_type FROM (DESCRIBE SELECT * "
                                f"FROM read_parquet('{tmp_path / 'all.parquet'}'))").fetchall())
    assert columns == ["queue", "job_id", "outcome", "result", "attempts", "at",
                       "created_at", "started_at", "error", "name", "payload", "stream_id",
                       "errors", "logs"]
    dead = [row for row in back if row["outcome"] == "dead"]
    assert dead and all(json.loads(row["errors"])[0]["message"] == row["error"] for row in dead)
    assert types["at"] == "TIMESTAMP WITH TIME ZONE" and types["attempts"] == "BIGINT"
    for row in back:
        for name in ("at", "created_at", "started_at"):
            if row[name] is not None:
                assert row[name].tzinfo is not None
                row[name] = int(row[name].timestamp() * 1000)
    assert back == jsonl
    assert sorted(r["stream_id"] for r in back) == sorted(e.stream_id for e in everything)
    # a window on the settle time: since inclusive, until exclusive, as the audit's
    times = sorted({e.at for e in everything})
    cut = times[len(times) // 2] if len(times) > 1 else times[0]
    want = [e.stream_id for e in floor.audit(queue, since=cut)]
    n = floor.export(queue, tmp_path / "late.jsonl", format="jsonl", since=cut)
    lines = [json.loads(line) for line in (tmp_path / "late.jsonl").read_text().splitlines()]
    assert n == len(lines) == len(want) and sorted(r["stream_id"] for r in lines) == sorted(want)
    early = floor.export(queue, tmp_path / "early.parquet",
                         until=datetime.fromtimestamp(cut / 1000, tz=UTC))
    assert early + n == 7
    assert {r["queue"] for r in lines} == {queue} and all(
        isinstance(r["at"], int) for r in lines)
    with pytest.raises(InvalidArgument):
        floor.export(queue, tmp_path / "x.csv", format="csv")
    with pytest.raises(InvalidArgument):
        floor.export("not-here", tmp_path / "x.parquet")


def test_emq_archive_query_and_export(floor: Floor, queue: str, tmp_path: Path) -> None:
    runner = CliRunner()
    path = str(floor.path)
    out = runner.invoke(emq, ["archive", "query", "SELECT outcome, count(*) AS n FROM "
                              f"outcomes WHERE queue = '{queue}' GROUP BY 1 ORDER BY 1",
                              "--floor", path, "--json"])
    assert out.exit_code == 0, out.output
    assert [json.loads(line) for line in out.output.splitlines()] == [
        {"outcome": "completed", "n": 5}, {"outcome": "dead", "n": 2}]
    table = runner.invoke(emq, ["archive", "query", "SELECT max(settled_at) AS latest FROM "
                                "outcomes", "--floor", path])
    assert table.exit_code == 0 and "latest" in table.output
    bad = runner.invoke(emq, ["archive", "query", "SELEC 1", "--floor", path])
    assert bad.exit_code == 1 and "query failed" in bad.output
    missing = runner.invoke(emq, ["archive", "query", "SELECT 1", "--floor",
                                  str(tmp_path / "none")])
    assert missing.exit_code == 1 and "no floor" in missing.output
    exported = runner.invoke(emq, ["archive", "export", queue, str(tmp_path / "q.jsonl"),
                                   "--format", "jsonl", "--floor", path, "--json"])
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.output)["rows"] == 7


REFUSED = {
    "read a file": "SELECT * FROM read_csv('{secret}')",
    "read a file by name": "SELECT * FROM '{secret}'",
    "list files": "SELECT * FROM glob('{folder}/*')",
    "write a file": "COPY (SELECT * FROM outcomes) TO '{folder}/out.csv'",
    "export the database": "EXPORT DATABASE '{folder}/dump'",
    "attach a database": "ATTACH '{folder}/other.duckdb' AS other",
    "install an extension": "INSTALL httpfs",
    "load an extension": "LOAD httpfs",
    "turn access back on": "SET enable_external_access = true",
    "unlock the settings": "SET lock_configuration = false",
    "reset the setting": "RESET enable_external_access",
    "a second statement": "SELECT 1; COPY (SELECT 1) TO '{folder}/two.csv'",
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_the_sql_reaches_no_file_database_or_extension(what: str, floor: Floor,
                                                       tmp_path: Path) -> None:
    """Issue 20, item 16: the query string may come from someone else (a dashboard, a
    script); it runs with this user's rights, so it reads and writes nothing outside."""
    secret = tmp_path / "secret.csv"
    secret.write_text("password\nhunter2\n")
    sql = REFUSED[what].format(secret=secret, folder=tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(QueryFailed) as info:
        floor.query(sql)
    assert "hunter2" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    # and still refused on the command line, with a one-line error
    out = CliRunner().invoke(emq, ["archive", "query", sql, "--floor", str(floor.path)])
    assert out.exit_code == 1 and "query failed" in out.output and "hunter2" not in out.output
    assert "Traceback" not in out.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_normal_queries_still_work_locked_down(floor: Floor, queue: str) -> None:
    answer = floor.query("SELECT count(*), min(settled_at) < now(), "
                         "max(json_extract(payload, '$.n')::INT) FROM outcomes "
                         f"WHERE queue = '{queue}' AND outcome = 'completed'")
    assert answer.rows[0][0] == 5 and answer.rows[0][1] is True and answer.rows[0][2] == 4
    with_cte = floor.query("WITH d AS (SELECT * FROM outcomes WHERE outcome = 'dead') "
                           "SELECT count(*) FROM d")
    assert with_cte.rows == [(2,)]


def test_an_explicit_opt_in_lets_the_sql_export(floor: Floor, queue: str,
                                                tmp_path: Path) -> None:
    target = tmp_path / "by-sql.csv"
    sql = (f"COPY (SELECT job_id FROM outcomes WHERE queue = '{queue}' ORDER BY stream_id) "
           f"TO '{target}' (HEADER)")
    floor.query(sql, external_access=True)
    assert len(target.read_text().splitlines()) == 1 + 7
    target.unlink()
    out = CliRunner().invoke(emq, ["archive", "query", sql, "--floor", str(floor.path),
                                   "--external-access"])
    assert out.exit_code == 0, out.output
    assert len(target.read_text().splitlines()) == 1 + 7
