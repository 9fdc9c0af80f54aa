"""A full disk under the floor (issue 8, item 17): a clear FloorFull, per queue, never a signal.

Each test mounts its own 2 MiB tmpfs (root can), so "full" is real: LMDB, the kernel and
the filesystem behave exactly as on a full production disk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from echomq import ArchiveError
from echomq.archive import Floor, FloorFull, declare, fold_declared
from echomq.archive.entries import entry_line
from echomq.archive.slices import build_slice
from echomq.archive.stream_ids import ZERO_ID
from echomq.cli.archive import archive_cli
from echomq.queue.connection import Connection, connect
from echomq.servers.valkey import EmbeddedValkey
from tests.support.recorder import Recorder


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs of the test's own, unmounted after it."""
    where = tmp_path / "small"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.fail("the full-disk tests mount a tmpfs: run the suite as root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path, leave: int = 0) -> Path:
    """Fill the filesystem, leaving about ``leave`` bytes free."""
    path = where / f"filler-{len(list(where.iterdir()))}"
    st = os.statvfs(where)
    todo = max(st.f_bavail * st.f_frsize - leave, 0)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while todo > 0 or leave == 0:  # leave == 0: to the very last block
            todo -= os.write(fd, b"x" * min(max(todo, 4096), 1 << 20))
    except OSError:
        pass
    finally:
        os.close(fd)
    return path


OPEN_ON_FULL_DISK = """
import sys
from echomq.archive import Floor, FloorFull
try:
    Floor(sys.argv[1])
except FloorFull as exc:
    print("FloorFull:", exc)
    sys.exit(3)
print("opened")
"""


def test_opening_a_floor_on_a_full_disk_is_an_error_not_sigbus(small_fs: Path) -> None:
    fill(small_fs)
    done = subprocess.run([sys.executable, "-c", OPEN_ON_FULL_DISK, str(small_fs / "floor")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != -signal.SIGBUS, "LMDB touched an unbacked page: SIGBUS"
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "FloorFull:" in done.stdout and str(small_fs / "floor") in done.stdout
    assert "bytes free" in done.stdout


@pytest.fixture
def own_conn(tmp_path: Path) -> Iterator[Connection]:
    """A private server: ``fold_declared`` folds every declared queue of the server."""
    server = EmbeddedValkey(tmp_path / "valkey")
    server.start()
    connection = connect(server.url)
    yield connection
    connection.close()
    server.cleanup()


def big_and_small(conn: Connection) -> tuple[Recorder, Recorder]:
    """Two declared queues: the first (in fold order) cannot fit, the second can."""
    big, small = Recorder(conn, "a-big"), Recorder(conn, "b-small")
    for rec in (big, small):
        declare(conn, rec.queue)
    pipe = conn.redis.pipeline(transaction=False)
    for i in range(300):  # ~1.2 MiB in the floor (one page each)
        pipe.xadd(big.key, {"job": f"big-{i}", "outcome": "completed",
                            "result": json.dumps("r" * 3000), "attempts": "1",
                            "at": str(1_700_000_000_000 + i), "created_at": "1"})
    pipe.execute()
    small.add(5)
    return big, small


def test_a_full_disk_fails_its_queue_and_the_others_still_fold(
        own_conn: Connection, small_fs: Path) -> None:
    big, small = big_and_small(own_conn)
    floor_path = small_fs / "floor"
    Floor(floor_path).close()  # room for the floor itself
    filler = fill(small_fs, leave=600 * 1024)
    reports = fold_declared(own_conn, floor_path)
    assert reports[big.queue].error is not None and "FloorFull" in reports[big.queue].error
    assert str(floor_path) in reports[big.queue].error
    assert reports[small.queue].error is None and reports[small.queue].entries == 5
    assert own_conn.redis.xlen(big.key) == 300  # nothing of the failed queue trimmed
    # room again: the same floor folds what failed, nothing lost
    filler.unlink()
    again = fold_declared(own_conn, floor_path)
    assert again[big.queue].error is None and again[big.queue].entries == 300
    with Floor(floor_path) as floor:
        assert floor.status(big.queue).entries == 300
        assert floor.status(small.queue).entries == 5


def test_the_cli_fold_reports_each_queue_and_exits_non_zero(
        own_conn: Connection, small_fs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big, small = big_and_small(own_conn)
    floor_path = small_fs / "floor"
    Floor(floor_path).close()
    fill(small_fs, leave=600 * 1024)
    url = f"redis://127.0.0.1:{own_conn.redis.connection_pool.connection_kwargs['port']}"
    result = CliRunner().invoke(archive_cli, ["fold", "--url", url, "--floor", str(floor_path),
                                              "--json"], catch_exceptions=False)
    assert result.exit_code == 1
    rows = {r["queue"]: r for r in map(json.loads, result.stdout.splitlines())}
    assert "FloorFull" in rows[big.queue]["error"]
    assert rows[small.queue]["error"] is None and rows[small.queue]["entries"] == 5
    assert f"fold failed for 1 of 2 queue(s): {big.queue}" in result.output


def test_a_floor_that_cannot_open_fails_every_queue_by_name(
        own_conn: Connection, small_fs: Path) -> None:
    big, small = big_and_small(own_conn)
    fill(small_fs)
    url = f"redis://127.0.0.1:{own_conn.redis.connection_pool.connection_kwargs['port']}"
    result = CliRunner().invoke(archive_cli, ["fold", "--url", url, "--floor",
                                              str(small_fs / "floor"), "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 1
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["queue"] for r in rows] == [big.queue, small.queue]
    assert all("FloorFull" in r["error"] for r in rows)
    reports = fold_declared(own_conn, small_fs / "floor")
    assert sorted(reports) == [big.queue, small.queue]
    assert all("FloorFull" in (r.error or "") for r in reports.values())


def test_every_lmdb_failure_is_an_archive_error_naming_the_floor(tmp_path: Path) -> None:
    path = tmp_path / "floor"
    (path / "data.mdb").parent.mkdir()
    (path / "data.mdb").write_bytes(b"this is not an LMDB file" * 400)
    with pytest.raises(ArchiveError, match=str(path)):
        Floor(path)


def test_the_map_never_outgrows_the_disk(small_fs: Path) -> None:
    with Floor(small_fs / "floor", map_size=64 * 1024 * 1024) as floor:
        assert floor.env.info()["map_size"] <= 2 * 1024 * 1024
    fill(small_fs)
    with pytest.raises(FloorFull):  # an existing floor opens; growing it is refused
        floor = Floor(small_fs / "floor", map_size=64 * 1024)
        try:
            items = []
            for i in range(100):
                sid = f"{1000 + i}-0"
                fields = {"job": f"j{i}", "outcome": "completed", "result": "r" * 2000,
                          "attempts": "1", "at": str(1_700_000_000_000 + i), "created_at": "1"}
                items.append((sid, fields, entry_line(sid, fields)))
            floor.commit_slice(build_slice("q", ZERO_ID, items), uploaded=True)
        finally:
            floor.close()
