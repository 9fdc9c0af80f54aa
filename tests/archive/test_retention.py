"""Retention never outruns the archive: on a declared queue a finished row is forgotten
only once the floor holds its outcome (the ``folded`` mark the fold records), on an
undeclared queue freely; the mark is fenced by the fold lease and never goes backwards."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import echomq
from echomq.archive import Driver, Floor, LeaseLost
from echomq.archive.fold_lease import FoldLease
from echomq.queue.retention import purge_counted
from tests.support.waits import wait_until


def settle(conn: echomq.Connection, queue: str, n: int, *, dead: bool = False) -> list[str]:
    """``n`` jobs finished through the public verbs: completed, or dead on their one try."""
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(n)], max_attempts=1)
    for job in echomq.claim(conn, queue, lease_ms=10_000, count=n):
        if dead:
            echomq.fail(conn, queue, job.id, job.token, "broken")
        else:
            echomq.complete(conn, queue, job.id, job.token, job.payload["n"])
    return ids


def present(conn: echomq.Connection, queue: str, ids: list[str]) -> list[str]:
    return [i for i in ids if echomq.get_job(conn, queue, i) is not None]


def folded(conn: echomq.Connection, queue: str) -> str | None:
    """The mark as a user reads it: the meta hash's ``folded`` field."""
    value = conn.redis.hget(conn.keys(queue).meta, "folded")
    return None if value is None else str(value)


@pytest.fixture
def driver(conn: echomq.Connection, floor_path: Path) -> Iterator[Driver]:
    found = Driver(conn, floor_path, claim_custody=True)
    yield found
    found.close()


@pytest.mark.parametrize("state", ["completed", "dead"])
def test_purge_forgets_exactly_the_folded_rows_then_the_rest_after_the_next_fold(
        conn, queue, driver, state):
    echomq.archive.declare(conn, queue)
    early = settle(conn, queue, 5, dead=state == "dead")
    driver.fold(queue)
    late = settle(conn, queue, 3, dead=state == "dead")

    first = purge_counted(conn, queue, state)
    assert (first.forgotten, first.kept_for_archive) == (5, 3)
    assert present(conn, queue, early + late) == late
    assert all(echomq.get_job(conn, queue, i).entry for i in late)  # type: ignore[union-attr]

    driver.fold(queue)
    assert echomq.purge(conn, queue, state) == 3
    assert present(conn, queue, early + late) == []
    assert getattr(echomq.counts(conn, queue), state) == 0
    # the archive still answers for every job Redis forgot
    for job_id in early + late:
        (entry,) = driver.floor.history(queue, job_id)
        assert entry.outcome == ("completed" if state == "completed" else "dead")


def test_an_undeclared_queue_forgets_freely(conn, queue):
    ids = settle(conn, queue, 4)
    assert purge_counted(conn, queue, "completed", keep=1) == echomq.Purged("completed", 3, 0)
    assert len(present(conn, queue, ids)) == 1


def test_rows_finished_before_the_declaration_may_go(conn, queue, driver):
    before = settle(conn, queue, 3)  # no outcome entry: nothing waits for the archive
    echomq.archive.declare(conn, queue)
    after = settle(conn, queue, 2)
    assert purge_counted(conn, queue, "completed") == echomq.Purged("completed", 3, 2)
    assert present(conn, queue, before + after) == after


def test_keep_and_older_than_on_a_declared_queue(conn, queue, driver):
    echomq.archive.declare(conn, queue)
    ids = settle(conn, queue, 6)
    driver.fold(queue)
    # a recent row is not older than an hour: nothing goes, whatever keep says
    assert echomq.purge(conn, queue, "completed", keep=0, older_than_ms=3_600_000) == 0
    # older than 0 ms and beyond the newest 2: four go, the newest two stay
    assert echomq.purge(conn, queue, "completed", keep=2, older_than_ms=0) == 4
    assert present(conn, queue, ids) == ids[-2:]


def run_consumer(conn: echomq.Connection, queue: str, **options: Any) -> None:
    """A real Consumer until the queue has nothing pending or active."""
    consumer = echomq.Consumer(conn, queue, lambda job: job.payload["n"], poll_ms=50,
                               **options)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    thread.start()
    try:
        wait_until(lambda: echomq.counts(conn, queue).pending == 0
                   and echomq.counts(conn, queue).active == 0)
    finally:
        consumer.stop()
        thread.join(10)


def test_the_consumers_keep_completed_keeps_every_unfolded_row(conn, queue, driver):
    echomq.archive.declare(conn, queue)
    old = echomq.add_many(conn, queue, [{"n": i} for i in range(20)])
    run_consumer(conn, queue, concurrency=2, keep_completed=2)
    assert len(present(conn, queue, old)) == 20  # no fold yet: keep_completed dropped none

    driver.fold(queue)
    new = echomq.add_many(conn, queue, [{"n": i} for i in range(5)])
    run_consumer(conn, queue, concurrency=2, keep_completed=2)
    # the folded rows go down to the keep; the five unfolded ones all stay
    assert present(conn, queue, old + new) == new


def test_the_mark_is_the_floors_checkpoint_and_never_goes_backwards(conn, queue, driver):
    echomq.archive.declare(conn, queue)
    assert folded(conn, queue) is None
    settle(conn, queue, 3)
    driver.fold(queue)
    mark = folded(conn, queue)
    assert mark == driver.floor.checkpoint(queue) != "0-0"
    lease = FoldLease(conn, queue, 5_000).acquire()
    try:
        record = str(echomq.archive.archive_of_record(conn, queue))
        assert lease.mark("1-0", record) is False  # behind the mark: nothing moves
        ms, seq = (int(x) for x in str(mark).split("-"))
        # compared as numbers, not text: "<ms>-10" is past "<ms>-9"
        assert lease.mark(f"{ms}-{seq + 10}", record) is True
        assert lease.mark(f"{ms}-{seq + 9}", record) is False
        assert folded(conn, queue) == f"{ms}-{seq + 10}"
    finally:
        lease.release()


def test_only_the_lease_holder_moves_the_mark(conn, queue, driver):
    echomq.archive.declare(conn, queue)
    settle(conn, queue, 2)
    driver.fold(queue)
    mark = folded(conn, queue)
    record = str(echomq.archive.archive_of_record(conn, queue))
    holder = FoldLease(conn, queue, 5_000).acquire()
    try:
        stranger = FoldLease(conn, queue, 5_000)
        with pytest.raises(LeaseLost):
            stranger.mark("99999999999999-0", record)
        assert folded(conn, queue) == mark
    finally:
        holder.release()


def test_a_driver_that_lost_its_lease_mid_fold_cannot_move_the_mark(conn, queue, floor_path):
    echomq.archive.declare(conn, queue)
    settle(conn, queue, 2)
    first = Driver(conn, floor_path, claim_custody=True)
    first.fold(queue)
    first.close()
    mark = folded(conn, queue)
    ids = settle(conn, queue, 3)
    lease_key = conn.keys(queue).archive_lease

    def steal(point: str) -> None:
        if point == "after_floor_commit":  # another driver takes the lease over
            conn.redis.set(lease_key, "someone-else", px=60_000)

    stalled = Driver(conn, floor_path, hook=steal, claim_custody=True)
    try:
        with pytest.raises(LeaseLost):
            stalled.fold(queue)
    finally:
        stalled.close()
        conn.redis.delete(lease_key)
    assert folded(conn, queue) == mark  # the floor took the slice; Redis was not told
    assert echomq.purge(conn, queue, "completed") == 2  # only what was marked before
    assert present(conn, queue, ids) == ids


def test_a_driver_that_is_not_the_archive_of_record_never_marks(conn, queue, driver, tmp_path):
    echomq.archive.declare(conn, queue, archive=driver.floor)
    settle(conn, queue, 2)
    other = Driver(conn, tmp_path / "other-floor")
    try:
        report = other.fold(queue)
    finally:
        other.close()
    assert report.entries == 2 and report.trim_refused
    assert folded(conn, queue) is None
    assert echomq.purge(conn, queue, "completed") == 0
    driver.fold(queue)
    assert echomq.purge(conn, queue, "completed") == 2


def test_retention_end_to_end_with_a_remote(conn, queue, floor_path, weed_remote):
    """Through SeaweedFS too: the floor commit is the line, the remote follows."""
    echomq.archive.declare(conn, queue)
    echomq.set_retention(conn, queue, completed_count=0)
    ids = settle(conn, queue, 4)
    assert echomq.apply_retention(conn, queue).kept_for_archive == 4
    driver = Driver(conn, floor_path, weed_remote)
    try:
        report = driver.fold(queue)
    finally:
        driver.close()
    assert report.uploaded >= 1 and report.trimmed == 4
    assert echomq.apply_retention(conn, queue).forgotten == 4
    assert present(conn, queue, ids) == []
    with Floor(floor_path) as floor:
        assert {e.job_id for e in floor.audit(queue)} == set(ids)


def test_purge_batches_past_one_call_and_stops_at_the_first_unfolded_row(conn, queue, driver):
    echomq.archive.declare(conn, queue)
    for _ in range(3):
        settle(conn, queue, 800)
    driver.fold(queue)
    late = settle(conn, queue, 500)
    done = purge_counted(conn, queue, "completed", keep=100)
    assert done == echomq.Purged("completed", 2400, 400)  # 500 unfolded, 100 of them kept anyway
    assert present(conn, queue, late) == late
    assert echomq.counts(conn, queue).completed == 500
