"""The floor's format: older floors open (migrated), newer ones are refused with the way
out, and the leaner format-2 indexes answer exactly what the old ones did."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from echomq.archive import Floor, floor_format
from echomq.archive.entries import entry_line
from echomq.archive.slices import SliceContent, build_slice
from echomq.errors import FloorError
from tests.archive.test_floor import chain

FORMAT_KEY = b"\x00floor-format"


def answers(floor: Floor, queue: str) -> tuple[object, ...]:
    """What a user reads back: audits by outcome and time, a job's history, the status."""
    return (
        [e.stream_id for e in floor.audit(queue)],
        [e.stream_id for e in floor.audit(queue, "dead")],
        [e.stream_id for e in floor.audit(queue, since=1_000_050, until=1_000_200)],
        [e.stream_id for e in floor.audit(queue, limit=7)],
        [e.stream_id for e in floor.history(queue, "j3")],
        floor.status(queue).to_dict(),
        floor.digest(queue),
    )


def make_format_1(path: Path) -> None:
    """Rewrite a floor the way format 1 left it: ``by_outcome`` (queue, outcome, settle
    time, id) and ``by_time`` (queue, settle time, id) instead of the per-outcome indexes,
    and no format record."""
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        by_outcome = env.open_db(b"by_outcome", txn=txn)
        by_time = env.open_db(b"by_time", txn=txn)
        for outcome in (b"completed", b"cancelled", b"dead"):
            index = env.open_db(b"by_" + outcome, txn=txn)
            for key, _ in txn.cursor(db=index):
                queue, _, at_id = key.partition(b"\x00")
                txn.put(queue + b"\x00" + outcome + b"\x00" + at_id, b"", db=by_outcome)
                txn.put(key, b"", db=by_time)
            txn.drop(index, delete=True)
        assert txn.delete(FORMAT_KEY, db=env.open_db(b"queues", txn=txn))
    env.close()


def named_dbs(path: Path) -> set[bytes]:
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin() as txn:
        names = {bytes(k) for k, _ in txn.cursor()}
    env.close()
    return names


@pytest.mark.parametrize("batch", [7, 50_000])  # resumed over many transactions, or one
def test_a_format_1_floor_opens_migrated_and_answers_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int) -> None:
    monkeypatch.setattr(floor_format, "BATCH", batch)
    path = tmp_path / "floor"
    slices = chain("q", 3, 40)
    with Floor(path) as floor:
        for content in slices[:2]:
            floor.commit_slice(content, uploaded=False)
        assert floor.format_version() == 2
        before = answers(floor, "q")
    make_format_1(path)
    assert {b"by_time", b"by_outcome"} <= named_dbs(path)
    assert b"by_dead" not in named_dbs(path)
    with Floor(path) as floor:  # migrated on open
        assert floor.format_version() == 2
        assert answers(floor, "q") == before
        assert floor.commit_slice(slices[2], uploaded=False) == (40, 0)  # folds go on
        assert len(floor.audit("q")) == 120
        assert floor.queues() == ["q"]  # the format record is no queue
    assert not {b"by_time", b"by_outcome"} & named_dbs(path)


def test_a_floor_from_a_newer_version_is_refused_naming_the_rebuild(tmp_path: Path) -> None:
    path = tmp_path / "floor"
    with Floor(path) as floor:
        floor.commit_slice(chain("q", 1, 5)[0], uploaded=False)
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        txn.put(FORMAT_KEY, b"3", db=env.open_db(b"queues", txn=txn))
    env.close()
    with pytest.raises(FloorError, match="format 3.*restore"):
        Floor(path)
    with pytest.raises(FloorError, match="format 3"):  # refused again: nothing half-open
        Floor(path)


def shuffled_slice(queue: str, prev: str, start: int, n: int) -> SliceContent:
    """Settle times out of stream order (another server's clock, a retried settle)."""
    items = []
    for i in range(start, start + n):
        at = 2_000_000 + ((i * 37) % n) * 10 - start
        fields = {"job": f"job-{i % 5}", "outcome": ("completed", "dead")[i % 2],
                  "result": "", "attempts": "1", "at": str(at)}
        sid = f"{5000 + i}-0"
        items.append((sid, fields, entry_line(sid, fields)))
    return build_slice(queue, prev, items)


def test_queues_committed_in_any_order_and_clocks_out_of_order(tmp_path: Path) -> None:
    """Keys that cannot be appended (an earlier queue's, settle times going back) are put
    the ordinary way: two floors fed in opposite queue order answer alike, in time order."""
    parts = {q: [shuffled_slice(q, "0-0", 0, 30)] for q in ("a", "b")}
    for q in parts:
        parts[q].append(shuffled_slice(q, parts[q][0].meta.last, 30, 30))
    results = []
    for name, order in (("one", ("a", "b")), ("two", ("b", "a"))):
        with Floor(tmp_path / name) as floor:
            for index in (0, 1):
                for q in order:
                    assert floor.commit_slice(parts[q][index], uploaded=True) == (30, 0)
            audit = floor.audit("a")
            assert [e.at for e in audit] == sorted(e.at for e in audit)
            assert len(audit) == 60 and len(floor.audit("b", "dead")) == 30
            results.append((answers(floor, "a"), answers(floor, "b")))
    assert results[0] == results[1]


@pytest.mark.parametrize("bad_job", ["a:b", "has space", "{q}", "x" * 201, "", "tab\there"])
def test_one_bad_job_id_in_a_slice_is_quarantined_and_only_it(tmp_path: Path,
                                                              bad_job: str) -> None:
    """Job ids are checked a whole slice at once; one that fails is found and quarantined
    alone, the others archived."""
    items = []
    for i in range(20):
        fields = {"job": bad_job if i == 11 else f"job-{i}", "outcome": "completed",
                  "result": "", "attempts": "1", "at": str(3_000_000 + i)}
        sid = f"{7000 + i}-0"
        items.append((sid, fields, entry_line(sid, fields)))
    with Floor(tmp_path / "floor") as floor:
        assert floor.commit_slice(build_slice("q", "0-0", items), uploaded=True) == (19, 1)
        assert [q.stream_id for q in floor.quarantined("q")] == ["7011-0"]
        assert len(floor.audit("q")) == 19 and floor.history("q", "job-12")
