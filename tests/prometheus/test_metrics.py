"""``echomq.prometheus.render``: every metric moves as jobs are added, completed, failed to
dead, cancelled, stalled (a silent holder, recovered and dead-lettered by the sweep) and
folded, read back with prometheus_client's own parser, on both executors."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import echomq
from echomq.archive import Driver, declare
from echomq.prometheus import BUCKETS_MS, render
from echomq.queue.connection import Connection
from tests.prometheus.scrape import Samples, parse, queues_of, value
from tests.support import consumers
from tests.support.waits import wait_lapsed, wait_until

LIB = Path(echomq.__file__).parent / "queue" / "lua" / "_lib.lua"


def scrape(conn: Connection, floor: Any = None) -> Samples:
    body, content_type = render(conn, floor)
    assert content_type.startswith("text/plain; version=")
    return parse(body)


def handler(job: Any) -> Any:
    """What each test job asks for: ok, fail (every time) or cancel."""
    what = job.payload["do"]
    if what == "fail":
        raise RuntimeError("boom")
    if what == "cancel":
        return echomq.CancelVerdict("not today")
    return {"ok": True}


def run_until(conn: Connection, queue: str, done: Any) -> None:
    consumers.run_until(conn, queue, handler, done)


def test_every_metric_moves_through_a_queue_s_life(conn: Connection, queue: str,
                                                    tmp_path: Path) -> None:
    declare(conn, queue)
    s = scrape(conn)
    assert queue in queues_of(s)
    assert value(s, "echomq_jobs", queue=queue, state="pending") == 0
    assert value(s, "echomq_archive_lag_entries", queue=queue) == 0

    echomq.add_many(conn, queue, [{"do": "ok"}, {"do": "ok"}, {"do": "cancel"}])
    echomq.add(conn, queue, {"do": "fail"}, max_attempts=2)
    s = wait_until(lambda: (s := scrape(conn)) and value(
        s, "echomq_oldest_pending_age_seconds", queue=queue) and s)
    assert value(s, "echomq_jobs", queue=queue, state="pending") == 4

    run_until(conn, queue, lambda: echomq.counts(conn, queue).dead == 1
              and echomq.counts(conn, queue).completed == 3)
    s = scrape(conn)
    finished = {o: value(s, "echomq_jobs_finished_total", queue=queue, outcome=o)
                for o in ("completed", "cancelled", "retried", "dead")}
    assert finished == {"completed": 2, "cancelled": 1, "retried": 1, "dead": 1}
    assert value(s, "echomq_jobs", queue=queue, state="completed") == 3
    assert value(s, "echomq_jobs", queue=queue, state="dead") == 1
    assert value(s, "echomq_jobs", queue=queue, state="pending") == 0
    assert value(s, "echomq_oldest_pending_age_seconds", queue=queue) == 0
    # five attempts ran: two completions, a cancellation, a retried failure, a dead-letter
    for name in ("echomq_job_run_seconds", "echomq_job_wait_seconds"):
        assert value(s, name + "_count", queue=queue) == 5
        assert value(s, name + "_bucket", queue=queue, le="+Inf") == 5
    assert value(s, "echomq_archive_lag_entries", queue=queue) == 4  # 2 + 1 + the dead
    assert value(s, "echomq_archive_lag_seconds", queue=queue) is not None
    assert value(s, "echomq_archive_last_fold_duration_seconds", queue=queue) is None

    floor = tmp_path / "floor"
    driver = Driver(conn, floor, claim_custody=True)
    try:
        assert driver.fold(queue).entries == 4
    finally:
        driver.close()
    after = scrape(conn, floor)
    assert value(after, "echomq_archive_lag_entries", queue=queue) == 0
    assert value(after, "echomq_archive_lag_seconds", queue=queue) == 0
    fold_seconds = value(after, "echomq_archive_last_fold_duration_seconds", queue=queue)
    assert fold_seconds is not None and fold_seconds > 0
    # the fold moved the outcomes to the floor; each is still counted once
    for name in ("echomq_job_run_seconds", "echomq_job_wait_seconds"):
        assert value(after, name + "_count", queue=queue) == 5
    assert {o: value(after, "echomq_jobs_finished_total", queue=queue, outcome=o)
            for o in finished} == finished

    # one more outcome after the fold: counted once more, lag is back to one entry
    echomq.add(conn, queue, {"do": "ok"})
    run_until(conn, queue, lambda: echomq.counts(conn, queue).completed == 4)
    s = scrape(conn, floor)
    assert value(s, "echomq_job_run_seconds_count", queue=queue) == 6
    assert value(s, "echomq_archive_lag_entries", queue=queue) == 1
    assert value(s, "echomq_jobs_finished_total", queue=queue, outcome="completed") == 3


def test_a_silent_holder_s_lease_is_past_due_then_recovered_then_dead_lettered(
    conn: Connection, queue: str
) -> None:
    job_id = echomq.add(conn, queue, {"do": "ok"})
    for expected_stalls, result in ((1, "recovered"), (2, "dead_lettered")):
        (held,) = echomq.claim(conn, queue, lease_ms=40)  # a holder that went silent
        assert held.id == job_id
        wait_lapsed(conn.redis, queue, job_id)
        s = scrape(conn)
        assert value(s, "echomq_active_leases_past_due", queue=queue) == 1
        echomq.stalled_check(conn, queue, max_stalled=2)
        s = scrape(conn)
        assert value(s, "echomq_active_leases_past_due", queue=queue) == 0
        assert value(s, "echomq_stalls_total", queue=queue, result=result) == 1
        assert expected_stalls == sum(value(s, "echomq_stalls_total", queue=queue, result=r)
                                      or 0 for r in ("recovered", "dead_lettered"))
    assert value(s, "echomq_jobs_finished_total", queue=queue, outcome="dead") == 1
    assert value(s, "echomq_jobs", queue=queue, state="dead") == 1
    assert value(s, "echomq_job_run_seconds_count", queue=queue) == 0  # no handler settled


def test_a_run_lands_in_the_bucket_of_its_duration(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"do": "ok"})
    (held,) = echomq.claim(conn, queue)
    time.sleep(0.3)
    echomq.complete(conn, queue, held.id, held.token, "done")
    s = scrape(conn)
    assert value(s, "echomq_job_run_seconds_bucket", queue=queue, le="0.25") == 0
    assert value(s, "echomq_job_run_seconds_bucket", queue=queue, le="+Inf") == 1
    run_sum = value(s, "echomq_job_run_seconds_sum", queue=queue)
    assert run_sum is not None and run_sum >= 0.3


def test_a_batch_settled_together_counts_each_attempt_in_its_own_bucket(
    conn: Connection, queue: str
) -> None:
    """One complete_many over jobs added at two times and claimed at two times: the run
    and wait histograms hold each attempt once, in the bucket of its own duration, and
    the sums are the rows' exact milliseconds (the settle buckets each distinct duration
    once, not each job)."""
    from echomq.jobs.settle import Settlement

    first = echomq.add_many(conn, queue, [{"do": "ok"}] * 3)
    time.sleep(0.06)
    second = echomq.add_many(conn, queue, [{"do": "ok"}] * 2)
    held = list(echomq.claim(conn, queue, count=2))
    time.sleep(0.12)
    held += echomq.claim(conn, queue, count=3)
    time.sleep(0.03)
    assert sorted(h.id for h in held) == sorted(first + second)
    echomq.complete_many(conn, queue, [Settlement(h.id, h.token, "completed", "null")
                                       for h in held])
    rows = [echomq.get_job(conn, queue, h.id) for h in held]
    runs, waits = [], []
    for row in rows:
        assert row is not None and row.finished_at and row.claimed_at and row.created_at
        runs.append(row.finished_at - row.claimed_at)
        waits.append(row.claimed_at - row.created_at)
    s = scrape(conn)
    for name, spans in (("echomq_job_run_seconds", runs), ("echomq_job_wait_seconds", waits)):
        assert value(s, name + "_count", queue=queue) == 5
        assert value(s, name + "_sum", queue=queue) == sum(spans) / 1000
        for bound in BUCKETS_MS:
            assert value(s, name + "_bucket", queue=queue, le=str(bound / 1000)) == sum(
                1 for ms in spans if ms <= bound), (name, bound, spans)


def test_the_oldest_pending_age_looks_past_the_first_priority_band(
    conn: Connection, queue: str
) -> None:
    echomq.add(conn, queue, {"do": "ok"}, priority=7)  # old, but claimed last
    time.sleep(0.3)
    echomq.add(conn, queue, {"do": "ok"}, priority=0)
    echomq.add(conn, queue, {"do": "ok"}, group="acct")
    age = value(scrape(conn), "echomq_oldest_pending_age_seconds", queue=queue)
    assert age is not None and age >= 0.3


def test_a_paused_queue_says_so(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"do": "ok"})
    assert value(scrape(conn), "echomq_queue_paused", queue=queue) == 0
    echomq.pause(conn, queue)
    assert value(scrape(conn), "echomq_queue_paused", queue=queue) == 1
    echomq.resume(conn, queue)
    assert value(scrape(conn), "echomq_queue_paused", queue=queue) == 0


def test_an_undeclared_queue_is_found_and_has_no_archive_lag(conn: Connection,
                                                            queue: str) -> None:
    echomq.add(conn, queue, {"do": "ok"})
    s = scrape(conn)
    assert value(s, "echomq_jobs", queue=queue, state="pending") == 1
    assert value(s, "echomq_archive_lag_entries", queue=queue) is None


def test_the_histogram_bounds_are_the_ones_the_lua_counts_into() -> None:
    lib = LIB.read_text()
    bounds = re.search(r"EMQ_BUCKETS_MS = \{([^}]*)\}", lib)
    fields = re.search(r"EMQ_BUCKET_FIELDS = \{([^}]*)\}", lib)
    count = re.search(r"EMQ_NBUCKETS = (\d+)", lib)
    assert bounds is not None and fields is not None and count is not None
    assert tuple(int(b) for b in bounds.group(1).split(",")) == BUCKETS_MS
    assert tuple(int(f.strip(" \n'")) for f in fields.group(1).split(",")) == BUCKETS_MS
    assert int(count.group(1)) == len(BUCKETS_MS)


def test_the_old_verb_of_the_same_name_still_answers(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {"do": "ok"})
    (held,) = echomq.claim(conn, queue)
    echomq.complete(conn, queue, held.id, held.token, "done")
    assert echomq.metrics(conn, queue) == {"completed": 1, "cancelled": 0, "retried": 0,
                                          "dead": 0}
    assert echomq.prometheus.render is render


def test_a_scrape_sees_only_its_own_prefix(server_url: str, queue: str) -> None:
    tenant = echomq.connect(server_url, prefix="tenant-m")
    other = echomq.connect(server_url)
    try:
        echomq.add(tenant, queue, {"do": "ok"})
        assert value(scrape(tenant), "echomq_jobs", queue=queue, state="pending") == 1
        assert queue not in queues_of(scrape(other))
    finally:
        tenant.close()
        other.close()
