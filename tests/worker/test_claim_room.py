"""The claim loop's room: a settle round trip on its way frees its jobs' slots for the
next claim where the Consumer buffers (short jobs), so the claim is in the server while
the settle is; where it holds only what it runs, it claims once the settle is answered."""

from __future__ import annotations

import queue as stdlib_queue
import threading

from echomq.queue.connection import Connection
from echomq.worker.claim_loop import ClaimLoop
from echomq.worker.held import Held
from echomq.worker.queues import QueuePlan


def loop(conn: Connection, queue: str, *, concurrency: int, prefetch: int | None,
         lease_ms: int = 30_000) -> ClaimLoop:
    return ClaimLoop(conn, QueuePlan(conn, queue), Held(conn), stdlib_queue.SimpleQueue(),
                     concurrency=concurrency, lease_ms=lease_ms, batch_size=100,
                     prefetch=prefetch, poll_s=0.01)


def room_now(claims: ClaimLoop) -> int:
    stop = threading.Event()
    stop.set()  # answer at once, never wait
    return claims._room(stop)


def test_a_settle_on_its_way_frees_its_slots_for_the_next_claim(
        conn: Connection, queue: str) -> None:
    claims = loop(conn, queue, concurrency=8, prefetch=200)  # 208 slots
    claims.held.inflight = 200  # two claim batches: one done and settling, one running
    assert room_now(claims) == 8
    claims.held.settling_now(100)
    assert room_now(claims) == 100  # the next batch goes out beside the settle
    claims.held.settling_now(0)
    assert room_now(claims) == 8


def test_the_discount_is_at_most_one_claim_batch(conn: Connection, queue: str) -> None:
    claims = loop(conn, queue, concurrency=8, prefetch=200)
    claims.held.inflight = 200
    claims.held.settling_now(1000)  # a big settle frees no more than a batch
    assert room_now(claims) == 100


def test_a_consumer_that_holds_only_what_it_runs_waits_for_the_answer(
        conn: Connection, queue: str) -> None:
    claims = loop(conn, queue, concurrency=1, prefetch=0)
    claims.held.inflight = 1
    claims.held.settling_now(1)
    assert room_now(claims) == 0
