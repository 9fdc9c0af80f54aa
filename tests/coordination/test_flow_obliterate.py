"""An obliterate meets flows across queues: each destroyed job whose parent waits on
another queue is counted there as failed ('obliterated'), through the outbox, which the
obliterate delivers before the queue's last key goes; a parent obliterated with its queue
leaves its children elsewhere to settle into nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

import echomq
from echomq.queue.bulk import obliterate_batches
from echomq.queue.cluster import scan_slot
from echomq.queue.connection import Connection
from echomq.queue.transitions.removals import BULK_BATCH
from tests.support.app_workers import Workers
from tests.support.flow_apps import across_queues
from tests.support.jobs import existing_job
from tests.support.waits import wait_until


@pytest.fixture
def workers() -> Iterator[Workers]:
    found = Workers()
    yield found
    found.stop_all()


def _keys(conn: Connection, queue: str) -> list[str]:
    keys = conn.keys(queue)
    return [str(k) for k in scan_slot(conn.redis, keys.pattern, 1000, keys.meta)]


def test_a_parent_on_another_queue_hears_that_its_children_were_obliterated(
        conn: Connection) -> None:
    app, a, b, double, report = across_queues(conn, "o")
    parent = echomq.chord([double.s(1), double.s(2)], then=report.s("f")).enqueue(app)
    # A -> A -> B: the middle step waits on A, its own parent on B
    last = echomq.chain(double.s(3), double.s(), report.s()).enqueue(app)
    [held, *_] = echomq.claim(conn, a, count=1)  # a child still running: a forced obliterate
    echomq.obliterate(conn, a, force=True)
    assert _keys(conn, a) == []  # the outbox went too, once delivered
    told = {f"child {kid} failed: obliterated" for kid in echomq.children(conn, b, parent)}
    assert existing_job(conn, b, parent).state == "dead"
    assert existing_job(conn, b, parent).last_error in told
    [middle] = echomq.children(conn, b, last)
    assert existing_job(conn, b, last).last_error == f"child {middle} failed: obliterated"
    assert echomq.counts(conn, b) == echomq.Counts(0, 0, 0, 0, 2)
    with pytest.raises(echomq.JobGone):
        echomq.complete(conn, a, held.id, held.token, 2)


def test_under_ignore_the_parent_is_released_with_none_for_each_obliterated_child(
        conn: Connection) -> None:
    app, a, b, double, report = across_queues(conn, "o")
    parent = echomq.chord([double.s(n) for n in (1, 2, 3)], then=report.s("i"),
                          on_child_failure="ignore").enqueue(app)
    [held] = echomq.claim(conn, a, count=1)
    index = echomq.children(conn, b, parent).index(held.id)
    # settled by the library's verb: its outcome waits in A's outbox, undelivered
    echomq.complete(conn, a, held.id, held.token, 2 * held.payload["args"][0])
    assert conn.redis.hlen(conn.keys(a).flow_outbox) == 1
    echomq.obliterate(conn, a)
    assert _keys(conn, a) == []
    released = existing_job(conn, b, parent)
    assert released.state == "pending"
    results: list[int | None] = [None, None, None]
    results[index] = 2 * (index + 1)
    assert released.payload == {"args": [results, "i"], "kwargs": {}}


def test_obliterating_the_parents_queue_leaves_its_children_elsewhere_settling_quietly(
        conn: Connection, workers: Workers, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "echomq")
    app, a, b, double, report = across_queues(conn, "o")
    parent = echomq.chord([double.s(1), double.s(2)], then=report.s("gone")).enqueue(app)
    kids = echomq.children(conn, b, parent)
    # A -> B -> A: the middle step, on B, goes with B; the last step, on A, hears of it
    last = echomq.chain(double.s(5), report.s().set(queue=b), double.s()).enqueue(app)
    [middle] = echomq.children(conn, a, last)
    [first] = echomq.children(conn, b, middle)
    echomq.obliterate(conn, b)
    assert _keys(conn, b) == []
    workers.start(app, [a])
    wait_until(lambda: all(existing_job(conn, a, k).state == "completed" for k in [*kids, first])
               and not conn.redis.exists(conn.keys(a).flow_outbox))
    assert existing_job(conn, a, last).state == "dead"
    assert existing_job(conn, a, last).last_error == f"child {middle} failed: obliterated"
    assert _keys(conn, b) == []  # their outcomes found no parent: nothing written on B
    workers.stop_all()
    assert [r.getMessage() for r in caplog.records] == []  # no settle or delivery failed


def test_children_past_one_batch_are_each_told_within_the_batches(conn: Connection) -> None:
    app, a, b, double, report = across_queues(conn, "o")
    size = BULK_BATCH + 200
    parent = echomq.chord([double.s(n) for n in range(size)], then=report.s("many"),
                          on_child_failure="ignore").enqueue(app)
    keys = len(_keys(conn, a))
    steps = list(obliterate_batches(conn, a))
    released = existing_job(conn, b, parent)
    assert released.state == "pending"
    assert released.payload == {"args": [[None] * size, "many"], "kwargs": {}}
    assert max(steps) <= BULK_BATCH
    assert sum(steps) == keys + 1  # with the outbox the obliterate filled and delivered


def test_an_interrupted_obliterate_keeps_the_outbox_for_the_next_one(conn: Connection) -> None:
    app, a, b, double, report = across_queues(conn, "o")
    parent = echomq.chord([double.s(1), double.s(2)], then=report.s("x")).enqueue(app)
    steps = obliterate_batches(conn, a)
    assert next(steps) == 0 and next(steps) > 0  # marked, then every row in one batch
    del steps  # stopped before the delivery: the outbox and the meta hash remain
    box = conn.keys(a).flow_outbox
    assert sorted(_keys(conn, a)) == sorted([conn.keys(a).meta, box])
    assert conn.redis.hlen(box) == 2 and existing_job(conn, b, parent).state == "waiting"
    echomq.obliterate(conn, a)  # obliterate again finishes: it delivers, then ends
    assert _keys(conn, a) == []
    dead = existing_job(conn, b, parent)
    assert dead.state == "dead" and str(dead.last_error).endswith("failed: obliterated")
