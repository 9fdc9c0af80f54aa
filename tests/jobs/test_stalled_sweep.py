"""The host's stalled sweep: one lapsed grouped job never wedges recovery.

The functions executor's native sweep refuses a pass that meets a lapsed grouped row
(the seed's ``EMQSTATE stalled lane not native``, kept by ``stalled_check``). The host
(the Consumer's beat, ``BatchScheduler`` and ``emq sweep``) then runs the scripted sweep
for that pass, which returns the grouped row to its lane and recovers the ungrouped
ones beside it, and says so once in the log. On scripts the same scenario is the control.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest
from click.testing import CliRunner

import echomq
from echomq.cli import main
from echomq.jobs import stalled
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys
from echomq.scheduling.scheduler import BatchScheduler
from echomq.worker.consumer import Consumer
from tests.support.waits import wait_lapsed, wait_until

SHORT = 40
GROUP = "acct"


def lapse_mixed(conn: Connection, queue: str, plain: int = 3) -> tuple[list[str], str]:
    """``plain`` ungrouped jobs and one grouped job, claimed under a short lease by a
    holder that went silent; every lease has lapsed. Returns (ungrouped ids, grouped id)."""
    ids = echomq.add_many(conn, queue, [{"n": i} for i in range(plain)])
    grouped = echomq.add(conn, queue, {"n": "grouped"}, group=GROUP)
    held = echomq.claim(conn, queue, lease_ms=SHORT, count=plain + 1)
    assert sorted(j.id for j in held) == sorted([*ids, grouped])
    wait_lapsed(conn.redis, queue, *ids, grouped)
    return ids, grouped


def warnings_about(caplog: pytest.LogCaptureFixture, queue: str) -> list[str]:
    return [
        r.getMessage() for r in caplog.records
        if r.name == "echomq.stalled" and r.levelno == logging.WARNING and queue in r.getMessage()
    ]


def expected_warnings(conn: Connection) -> int:
    """The scripted sweep never meets the refusal, so it has nothing to say."""
    return 1 if conn.executor_name == "functions" else 0


def assert_back_in_place(conn: Connection, queue: str, ids: list[str], grouped: str) -> None:
    keys = Keys(queue)
    assert sorted(conn.redis.zrange(keys.pending, 0, -1)) == sorted(ids)
    assert conn.redis.zrange(keys.lane(GROUP), 0, -1) == [grouped]  # its lane, not pending
    assert conn.redis.zcard(keys.active) == 0
    for job_id in [*ids, grouped]:
        job = echomq.get_job(conn, queue, job_id)
        assert job is not None and (job.state, job.stalled) == ("pending", 1)


def test_the_raw_functions_verb_still_refuses(conn: Connection, queue: str) -> None:
    lapse_mixed(conn, queue)
    if conn.executor_name == "functions":
        with pytest.raises(echomq.LaneNotNative):
            echomq.stalled_check(conn, queue, max_stalled=2)
    else:
        assert len(echomq.stalled_check(conn, queue, max_stalled=2).recovered) == 4


def test_a_consumer_with_stalled_recovery_recovers_grouped_and_plain_jobs(
    conn: Connection, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="echomq.stalled")
    ids, grouped = lapse_mixed(conn, queue)
    ran: list[str] = []
    consumer = Consumer(conn, queue, lambda job: ran.append(job.id), recovery="stalled",
                        max_stalled=2, lease_ms=10_000, beat_ms=50, poll_ms=50)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    thread.start()
    try:
        wait_until(lambda: echomq.counts(conn, queue).completed == 4)
    finally:
        consumer.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert sorted(ran) == sorted([*ids, grouped])  # each ran once, the grouped one too
    for job_id in ran:
        job = echomq.get_job(conn, queue, job_id)
        assert job is not None and (job.state, job.stalled) == ("completed", 1)
    assert len(warnings_about(caplog, queue)) == expected_warnings(conn)


def test_the_batch_scheduler_recovers_grouped_and_plain_jobs(
    conn: Connection, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="echomq.stalled")
    ids, grouped = lapse_mixed(conn, queue)
    with BatchScheduler(conn) as batch:
        batch.add_sweep(queue, interval_ms=50, max_stalled=2)
        wait_until(lambda: echomq.counts(conn, queue).pending == 4)
        wait_until(lambda: batch.passes >= 3)  # later passes find nothing and say nothing
    assert_back_in_place(conn, queue, ids, grouped)
    assert "failed" not in caplog.text
    assert len(warnings_about(caplog, queue)) == expected_warnings(conn)


def test_emq_sweep_recovers_grouped_and_plain_jobs(
    conn: Connection, server_url: str, queue: str
) -> None:
    ids, grouped = lapse_mixed(conn, queue)
    args = ["--url", server_url, "--executor", conn.executor_name, "sweep", "-q", queue,
            "--max-stalled", "2", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output.strip().splitlines()[-1])
    assert sorted(answer["recovered"]) == sorted([*ids, grouped]) and answer["dead"] == []
    assert_back_in_place(conn, queue, ids, grouped)


def test_emq_sweep_refuses_a_bad_limit_with_a_clear_error(server_url: str, queue: str) -> None:
    args = ["--url", server_url, "sweep", "-q", queue, "--limit", "0"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and "limit must be a positive integer" in result.output
    assert not isinstance(result.exception, echomq.EchoMQError)  # a message, not a traceback


def test_the_fallback_is_said_once_per_queue_and_every_pass_recovers(
    conn: Connection, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="echomq.stalled")
    swept: list[Any] = []
    for _ in range(2):
        ids, grouped = lapse_mixed(conn, queue, plain=1)
        swept.append(stalled.sweep_stalled(conn, queue, max_stalled=3))
        assert sorted(swept[-1].recovered) == sorted([*ids, grouped])
        for job in echomq.claim(conn, queue, lease_ms=60_000, count=10):  # out of the way
            echomq.complete(conn, queue, job.id, job.token)
    assert len(warnings_about(caplog, queue)) == expected_warnings(conn)


def test_a_dead_letter_at_the_threshold_still_happens_through_the_fallback(
    conn: Connection, queue: str
) -> None:
    ids, grouped = lapse_mixed(conn, queue, plain=1)
    swept = stalled.sweep_stalled(conn, queue)  # the default threshold of 1
    assert sorted(swept.dead) == sorted([*ids, grouped]) and swept.recovered == []
    assert echomq.counts(conn, queue).dead == 2
    assert conn.redis.hget(Keys(queue).base + "gactive", GROUP) is None  # the slot came back
