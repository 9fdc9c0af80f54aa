"""Flows: a chord of 10,000 children on a fresh private Valkey, medians of 3.

- the add: the whole chord (10,001 jobs) in its one ``flow_add`` transition (ms);
- the release: the last child's ``complete`` call, which counts it, reads the 10,000
  results into the parent's payload and makes the parent pending (ms, one round trip);
- the hand-over: with one worker process (an App's worker on threads, concurrency 16)
  running the whole chord, the server's time from the last child's ``finished_at`` to the
  parent's ``claimed_at`` (ms), and the chord end to end (s).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import echomq
from echomq.jobs.settle import Settlement
from echomq.servers.valkey import EmbeddedValkey

CHILDREN = 10_000


def _app(conn: echomq.Connection) -> tuple[echomq.App, Any, Any]:
    app = echomq.App(conn=conn)

    @app.task(queue="bench", name="bench.child")
    def child(n: int) -> int:
        return n

    @app.task(queue="bench", name="bench.report")
    def report(results: list[int]) -> int:
        return len(results)

    return app, child, report


def _chord(app: echomq.App, child: Any, report: Any) -> tuple[str, float]:
    started = time.perf_counter()
    parent = echomq.chord([child.s(n) for n in range(CHILDREN)], then=report.s()).enqueue(app)
    return parent, (time.perf_counter() - started) * 1000


def release_once() -> tuple[float, float]:
    """(add ms, the last child's complete ms) with every child settled by hand."""
    with EmbeddedValkey() as server:
        conn = echomq.connect(server.url)
        app, child, report = _app(conn)
        parent, add_ms = _chord(app, child, report)
        held: list[echomq.ClaimedJob] = []
        while len(held) < CHILDREN:
            held += echomq.claim(conn, "bench", lease_ms=600_000, count=1000)
        settle = [Settlement(j.id, j.token, "completed", str(i)) for i, j in enumerate(held)]
        for start in range(0, len(settle) - 1, 1000):
            echomq.complete_many(conn, "bench", settle[start:min(start + 1000, len(settle) - 1)])
        last = settle[-1]
        started = time.perf_counter()
        echomq.complete(conn, "bench", last.job_id, last.token, CHILDREN - 1)
        release_ms = (time.perf_counter() - started) * 1000
        found = echomq.get_job(conn, "bench", parent)
        assert found is not None and found.state == "pending", found
        conn.close()
    return add_ms, release_ms


def handover_once() -> tuple[float, float]:
    """(ms from the last child's finish to the parent's claim, s end to end)."""
    with EmbeddedValkey() as server:
        conn = echomq.connect(server.url)
        app, child, report = _app(conn)
        started = time.perf_counter()
        parent, _ = _chord(app, child, report)
        worker = app.worker(["bench"], concurrency=16)
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
        thread.start()
        try:
            while (echomq.get_job(conn, "bench", parent) or _gone()).state != "completed":
                time.sleep(0.005)
            total_s = time.perf_counter() - started
        finally:
            worker.stop()
            thread.join(30)
        done = echomq.get_job(conn, "bench", parent)
        assert done is not None and done.result == CHILDREN, done
        pipe = conn.redis.pipeline(transaction=False)
        for kid in done.children:
            pipe.hget(conn.keys("bench").job(kid), "finished_at")
        last_finished = max(int(v) for v in pipe.execute())
        assert done.claimed_at is not None
        conn.close()
    return float(done.claimed_at - last_finished), total_s


def _gone() -> Any:
    raise RuntimeError("the chord's parent vanished")


def rows(runs: int = 3) -> list[tuple[str, str]]:
    adds, releases, handovers, totals = [], [], [], []
    for _ in range(runs):
        add_ms, release_ms = release_once()
        adds.append(add_ms)
        releases.append(release_ms)
        handover_ms, total_s = handover_once()
        handovers.append(handover_ms)
        totals.append(total_s)
    med = statistics.median
    return [
        (f"chord of {CHILDREN:,}: add, one flow_add call (ms)", f"{med(adds):,.0f}"),
        ("chord: the last child's complete, releasing the parent (ms)",
         f"{med(releases):,.1f}"),
        ("chord: last child finished -> parent claimed, server times (ms)",
         f"{med(handovers):,.0f}"),
        ("chord: end to end, 1 worker process c=16 (s)", f"{med(totals):,.2f}"),
    ]


if __name__ == "__main__":
    for name, value in rows():
        print(f"{name:64s} {value:>12s}")
