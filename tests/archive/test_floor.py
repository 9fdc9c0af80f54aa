"""The floor's contract, on real LMDB files."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from echomq.archive import Floor, FloorGap, Outcome
from echomq.archive.entries import entry_line
from echomq.archive.slices import SliceContent, build_slice

OUTCOMES = ("completed", "cancelled", "dead")


def make_slice(queue: str, prev: str, start: int, n: int, bad: tuple[int, ...] = (),
               prev_digest: str = "") -> SliceContent:
    items = []
    for i in range(start, start + n):
        if i in bad:
            fields = {"job": f"j{i}", "outcome": "nope"}
        else:
            fields = {"job": f"j{i % 7}", "outcome": OUTCOMES[i % 3], "result": f"r{i}",
                      "attempts": str(i % 5), "at": str(1_000_000 + i * 10)}
        sid = f"{1000 + i}-0"
        items.append((sid, fields, entry_line(sid, fields)))
    return build_slice(queue, prev, items, prev_digest=prev_digest)


def chain(queue: str, slices: int, per: int) -> list[SliceContent]:
    out, prev, digest = [], "0-0", ""
    for s in range(slices):
        content = make_slice(queue, prev, s * per, per, prev_digest=digest)
        out.append(content)
        prev, digest = content.meta.last, content.meta.digest
    return out


@pytest.fixture
def floor(tmp_path: Path) -> Floor:
    with Floor(tmp_path / "floor") as f:
        yield f


def test_commit_is_one_step_and_idempotent(floor: Floor) -> None:
    a, b = chain("q", 2, 10)
    assert floor.checkpoint("q") == "0-0"
    assert floor.commit_slice(a, uploaded=False) == (10, 0)
    assert floor.commit_slice(a, uploaded=False) is None  # at the checkpoint: no-op
    assert floor.commit_slice(b, uploaded=True) == (10, 0)
    assert floor.commit_slice(a, uploaded=True) is None  # below it
    status = floor.status("q")
    assert (status.checkpoint, status.entries, status.slices, status.pending) == (
        b.meta.last, 20, 2, 1)
    assert [m.first for m in floor.pending_slices("q")] == [a.meta.first]
    assert [m.first for m in floor.slices("q")] == [a.meta.first, b.meta.first]


def test_a_slice_past_the_checkpoint_is_refused(floor: Floor) -> None:
    _, b = chain("q", 2, 10)
    with pytest.raises(FloorGap, match="checkpoint"):
        floor.commit_slice(b, uploaded=True)
    assert floor.status("q").entries == 0


def test_an_overlapping_slice_adds_only_what_is_new(floor: Floor) -> None:
    first = make_slice("q", "0-0", 0, 10)
    floor.commit_slice(first, uploaded=True)
    wider = make_slice("q", "0-0", 0, 15)
    assert floor.commit_slice(wider, uploaded=True) == (5, 0)
    assert floor.status("q").entries == 15


def test_queues_are_separate(floor: Floor) -> None:
    floor.commit_slice(make_slice("a", "0-0", 0, 5), uploaded=True)
    floor.commit_slice(make_slice("ab", "0-0", 0, 3), uploaded=True)
    assert floor.queues() == ["a", "ab"]
    assert len(floor.entries("a")) == 5 and len(floor.entries("ab")) == 3
    assert all(e.queue == "a" for e in floor.audit("a"))


def test_history_audit_and_quarantine(floor: Floor) -> None:
    floor.commit_slice(make_slice("q", "0-0", 0, 30, bad=(4, 17)), uploaded=True)
    history = floor.history("q", "j3")
    assert [e.job_id for e in history] == ["j3"] * 3  # 17 is malformed
    assert [e.stream_id for e in history] == sorted((e.stream_id for e in history),
                                                    key=lambda s: int(s.split("-")[0]))
    dead = floor.audit("q", outcome="dead")
    assert {e.outcome for e in dead} == {Outcome.DEAD} and len(dead) == 9  # 10 minus one bad
    window = floor.audit("q", since=1_000_100, until=1_000_200)
    assert [e.at for e in window] == [1_000_100 + 10 * i for i in range(10) if 10 + i != 17]
    as_dt = floor.audit("q", since=datetime.fromtimestamp(1000.1, tz=UTC),
                        until=datetime.fromtimestamp(1000.2, tz=UTC))
    assert as_dt == window
    assert len(floor.audit("q", limit=3)) == 3
    kept = floor.quarantined("q")
    assert [(k.stream_id, dict(k.fields)["outcome"]) for k in kept] == [
        ("1004-0", "nope"), ("1017-0", "nope")]
    status = floor.status("q")
    assert (status.entries, status.quarantined) == (28, 2)
    assert (status.oldest_at, status.newest_at) == (1_000_000, 1_000_290)


def test_export_jsonl(floor: Floor) -> None:
    floor.commit_slice(make_slice("q", "0-0", 0, 9, bad=(2,)), uploaded=True)
    out = io.StringIO()
    assert floor.export_jsonl("q", out, outcome="cancelled", quarantine=True) == 4
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r.get("outcome") for r in rows[:3]] == ["cancelled"] * 3
    assert rows[3]["reason"].startswith("unknown outcome")


def test_the_map_grows_instead_of_failing(tmp_path: Path) -> None:
    with Floor(tmp_path / "tiny", map_size=64 * 1024) as floor:
        for content in chain("q", 8, 500):
            floor.commit_slice(content, uploaded=False)
        assert floor.grows >= 3
        assert floor.status("q").entries == 4000
        assert floor.env.info()["map_size"] > 64 * 1024


def test_readers_never_block_the_writer(floor: Floor) -> None:
    a, b = chain("q", 2, 10)
    floor.commit_slice(a, uploaded=True)
    snapshot_open, release = threading.Event(), threading.Event()
    seen: list[int] = []

    def reader() -> None:
        with floor.env.begin() as txn:  # a long-lived read snapshot
            snapshot_open.set()
            release.wait(5)
            seen.append(txn.stat(floor.store.dbs["entries"])["entries"])

    thread = threading.Thread(target=reader)
    thread.start()
    snapshot_open.wait(5)
    started = time.monotonic()
    floor.commit_slice(b, uploaded=True)
    assert time.monotonic() - started < 1.0
    release.set()
    thread.join()
    assert seen == [10]  # the reader kept its snapshot
    assert floor.status("q").entries == 20


def test_pending_bytes_and_safe_trim_point(floor: Floor) -> None:
    a, b, c = chain("q", 3, 5)
    floor.commit_slice(a, uploaded=False)
    floor.commit_slice(b, uploaded=False, keep_bytes=False)
    floor.commit_slice(c, uploaded=True)
    assert floor.safe_trim_point("q", with_remote=False) == c.meta.last
    assert floor.safe_trim_point("q", with_remote=True) == "0-0"
    assert floor.slice_bytes(a.meta) == a.data
    assert floor.slice_bytes(b.meta) == b.data  # rebuilt from the entries
    floor.mark_uploaded(a.meta)
    assert floor.safe_trim_point("q", with_remote=True) == a.meta.last
    floor.mark_uploaded(b.meta)
    assert floor.safe_trim_point("q", with_remote=True) == c.meta.last
    assert floor.status("q").pending == 0


def test_one_environment_per_path_per_process(tmp_path: Path) -> None:
    one = Floor(tmp_path / "f")
    two = Floor(tmp_path / "f")
    assert one.env is two.env
    one.close()
    assert two.checkpoint("q") == "0-0"
    two.close()


CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {here!r})
    from test_floor import make_slice
    from echomq.archive import Floor
    floor = Floor({path!r}, map_size=128 * 1024)
    prev = "0-0"
    for s in range(100000):
        content = make_slice("q", prev, s * 200, 200)
        floor.commit_slice(content, uploaded=False)
        prev = content.meta.last
        print(prev, flush=True)
    """
)


def test_kill_9_mid_write_leaves_whole_slices(tmp_path: Path) -> None:
    path = tmp_path / "floor"
    code = CHILD.format(here=str(Path(__file__).parent), path=str(path))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert child.stdout is not None
    try:
        for _ in range(25):
            assert child.stdout.readline(), "the child died before committing 25 slices"
        time.sleep(0.05)  # kill it somewhere in the middle of a later commit
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    with Floor(path) as floor:
        status = floor.status("q")
        slices = floor.slices("q")
        assert len(slices) >= 25
        assert status.checkpoint == slices[-1].last
        assert status.entries == sum(s.count for s in slices) == len(floor.entries("q"))
        assert len(floor.audit("q")) == status.entries
        # and the floor keeps working after the crash
        nxt = chain("q", len(slices) + 1, 200)[-1]
        assert floor.commit_slice(nxt, uploaded=True) == (200, 0)


def test_a_new_floor_is_its_owners_alone(tmp_path: Path) -> None:
    """The floor holds every payload and result: a new one was 0755 with files 0644,
    readable by every local user. An existing folder keeps the mode it was given."""
    old = os.umask(0o022)
    try:
        with Floor(tmp_path / "new" / "floor"):
            pass
        (tmp_path / "shared").mkdir(mode=0o750)
        with Floor(tmp_path / "shared"):
            pass
    finally:
        os.umask(old)
    folder = tmp_path / "new" / "floor"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
    assert files and set(files.values()) == {0o600}, files
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o750
