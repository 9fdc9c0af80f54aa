"""A drain meets flows: each drained child is counted on its parent as failed ('drained'),
as remove_job counts one, so no parent waits for ever for children that are gone."""

from __future__ import annotations

import echomq
from echomq.queue.bulk import drain_batches
from echomq.queue.connection import Connection
from tests.support.flow_apps import across_queues
from tests.support.jobs import existing_job


def test_drained_children_dead_letter_their_chord_and_every_later_chain_step(
        conn: Connection) -> None:
    app, a, _, double, report = across_queues(conn, "d")
    here = report.s("f").set(queue=a)
    parent = echomq.chord([double.s(1), double.s(2)], then=here).enqueue(app)
    last = echomq.chain(double.s(1), double.s(), double.s()).enqueue(app)
    assert list(drain_batches(conn, a, batch=2)) == [2, 1]  # the budget holds
    first, _ = echomq.children(conn, a, parent)
    assert existing_job(conn, a, parent).state == "dead"
    assert existing_job(conn, a, parent).last_error == f"child {first} failed: drained"
    [middle] = echomq.children(conn, a, last)
    [step] = echomq.children(conn, a, middle)
    assert existing_job(conn, a, middle).last_error == f"child {step} failed: drained"
    assert existing_job(conn, a, last).last_error == (
        f"child {middle} failed: child {step} failed: drained")
    assert echomq.counts(conn, a) == echomq.Counts(0, 0, 0, 0, 3)


def test_under_ignore_a_drain_releases_the_parent_and_leaves_nothing_pending(
        conn: Connection) -> None:
    app, a, _, double, report = across_queues(conn, "d")
    # the parent sorts ahead of its children once released: it joins the set being drained
    kids = [double.s(n).set(priority=5) for n in range(3)]
    drained = echomq.chord(kids, then=report.s("d").set(queue=a, priority=0),
                           on_child_failure="ignore").enqueue(app)
    assert echomq.drain(conn, a) == 4  # its three children, then the parent they released
    assert echomq.get_job(conn, a, drained) is None
    assert conn.redis.zcard(conn.keys(a).pending) == 0
    assert echomq.counts(conn, a) == echomq.Counts(0, 0, 0, 0, 0)
    # a child still running when the drain came: the parent waits for it, then runs
    waiting = echomq.chord([double.s(1), double.s(2)], then=report.s("w").set(queue=a),
                           on_child_failure="ignore").enqueue(app)
    [held] = echomq.claim(conn, a)
    assert echomq.drain(conn, a) == 1 and existing_job(conn, a, waiting).state == "waiting"
    echomq.complete(conn, a, held.id, held.token, 2)
    released = existing_job(conn, a, waiting)
    assert released.state == "pending"
    assert released.payload == {"args": [[2, None], "w"], "kwargs": {}}


def test_a_child_waiting_for_its_retry_is_drained_with_the_scheduled_jobs(
        conn: Connection) -> None:
    app, a, _, double, report = across_queues(conn, "d")
    parent = echomq.chord([double.s(1).set(max_attempts=3)],
                          then=report.s().set(queue=a)).enqueue(app)
    [held] = echomq.claim(conn, a)
    echomq.fail(conn, a, held.id, held.token, "later", backoff_ms=60_000)
    assert echomq.counts(conn, a).scheduled == 1
    assert echomq.drain(conn, a, scheduled=False) == 0
    assert existing_job(conn, a, parent).state == "waiting"
    assert echomq.drain(conn, a) == 1
    assert existing_job(conn, a, parent).last_error == f"child {held.id} failed: drained"


def test_a_parent_on_another_queue_hears_of_its_drained_children(conn: Connection) -> None:
    app, a, b, double, report = across_queues(conn, "d")
    parent = echomq.chord([double.s(1), double.s(2)], then=report.s("x")).enqueue(app)
    last = echomq.chain(double.s(3), report.s()).enqueue(app)  # A -> B
    assert existing_job(conn, b, parent).state == "waiting"
    assert echomq.drain(conn, a) == 3  # no worker serves A: the drain delivers
    told = {f"child {kid} failed: drained" for kid in echomq.children(conn, b, parent)}
    assert existing_job(conn, b, parent).last_error in told  # the outbox's order: either one
    [step] = echomq.children(conn, b, last)
    assert existing_job(conn, b, last).last_error == f"child {step} failed: drained"
    assert not conn.redis.exists(conn.keys(a).flow_outbox)
    assert echomq.counts(conn, b) == echomq.Counts(0, 0, 0, 0, 2)
