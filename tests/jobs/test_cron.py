"""Cron schedules: stored with the queue, refused when malformed, and fired once per fire
time whoever fires them: two scheduler processes, a scheduler that was down, a fired job
that finished and was purged."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

import echomq
from echomq.queue.connection import Connection
from echomq.scheduling.cron import fire_due, fire_queue
from tests.support import ROOT
from tests.support.pids import ended
from tests.support.waits import server_ms, wait_until

EVERY_SECOND = "* * * * * *"


@pytest.fixture
def pconn(server_url: str, executor: str) -> Iterator[Connection]:
    """A connection under a prefix of the test's own: its cron set holds only this
    test's queues, whatever other tests scheduled on the shared server."""
    connection = echomq.connect(server_url, executor=executor,  # type: ignore[arg-type]
                                prefix=f"cron{uuid.uuid4().hex[:8]}")
    yield connection
    connection.close()


def fired_ids(conn: Connection, queue: str) -> list[str]:
    """Every cron job of ``queue`` still pending, by fire time."""
    ids = [i for i in conn.redis.zrange(conn.keys(queue).pending, 0, -1)
           if i.startswith("cron-")]
    return sorted(ids, key=lambda i: int(i.rsplit("-", 1)[1]))


# -- what schedule() refuses --------------------------------------------------------


@pytest.mark.parametrize(("args", "options", "error", "words"), [
    (("bad:name", EVERY_SECOND), {}, echomq.InvalidKey, "schedule name"),
    (("x" * 190, EVERY_SECOND), {}, echomq.InvalidKey, "limit is 178"),
    (("n", "* * * *"), {}, echomq.InvalidArgument, "4 fields"),
    (("n", "61 * * * *"), {}, echomq.InvalidArgument, "61"),
    (("n", "0 0 30 2 *"), {}, echomq.InvalidArgument, "never fires"),
    (("n", "* * * * *"), {"timezone": "Mars/Olympus"}, echomq.InvalidArgument, "Mars/Olympus"),
    (("n", "* * * * *"), {"job_id": "fixed"}, echomq.InvalidArgument, "derived"),
    (("n", "* * * * *"), {"colour": "red"}, echomq.InvalidArgument, "colour"),
    (("n", "* * * * *"), {"priority": 5000}, echomq.InvalidArgument, "priority"),
    (("n", "* * * * *"), {"group": "a b"}, echomq.InvalidKey, "group"),
], ids=["name", "long-name", "fields", "range", "never", "timezone", "job_id", "unknown",
        "priority", "group"])
def test_a_bad_schedule_is_refused_naming_the_problem_and_nothing_is_stored(
        pconn, queue, args, options, error, words):
    with pytest.raises(error, match=re.escape(words)):
        echomq.schedule(pconn, queue, *args, {"p": 1}, **options)
    assert echomq.schedules(pconn, queue) == []
    assert pconn.redis.smembers(pconn.cron_set) == set()


def test_a_payload_add_would_refuse_is_refused(server_url, queue):
    small = echomq.connect(server_url, payload_limit=64, prefix="cronpayload")
    with pytest.raises(echomq.InvalidArgument, match="not JSON"):
        echomq.schedule(small, queue, "n", EVERY_SECOND, {1, 2})
    with pytest.raises(echomq.InvalidArgument, match="limit is 64"):
        echomq.schedule(small, queue, "n", EVERY_SECOND, "x" * 100)
    assert echomq.schedules(small, queue) == []


# -- stored, listed, replaced, removed ------------------------------------------------


def test_a_schedule_is_listed_with_its_next_fire_in_its_timezone(pconn, queue):
    stored = echomq.schedule(pconn, queue, "report", "0 9 * * *", {"r": 1},
                             timezone="America/New_York", priority=3, name="daily")
    [listed] = echomq.schedules(pconn, queue)
    assert listed == stored
    assert (listed.cron, listed.payload, listed.last_fire_at) == ("0 9 * * *", {"r": 1}, None)
    assert listed.options["priority"] == 3 and listed.options["name"] == "daily"
    assert listed.next_fire_at is not None
    local = datetime.fromtimestamp(listed.next_fire_at / 1000, ZoneInfo("America/New_York"))
    assert (local.hour, local.minute, local.second) == (9, 0, 0)
    assert 0 < listed.next_fire_at - server_ms(pconn.redis) <= 86_400_000


def test_a_new_schedule_never_fires_for_a_time_before_it_was_stored(pconn, queue):
    stored = echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {})
    assert fire_queue(pconn, queue, now=stored.created_at - 60_000) == []
    assert fired_ids(pconn, queue) == []


def test_a_fired_job_carries_the_schedule_s_payload_and_options(pconn, queue):
    stored = echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {"hello": "cron"},
                             priority=7, max_attempts=2, group="g", name="ticker")
    now = stored.created_at + 5_000
    [job_id] = fire_due(pconn, now=now)
    assert job_id == f"cron-tick-{now // 1000 * 1000}"
    job = echomq.get_job(pconn, queue, job_id)
    assert job is not None
    assert (job.payload, job.priority, job.max_attempts, job.group, job.name) == (
        {"hello": "cron"}, 7, 2, "g", "ticker")
    [claimed] = echomq.claim(pconn, queue, lease_ms=10_000)
    assert claimed.id == job_id


def test_a_replaced_schedule_keeps_its_last_fire_and_uses_the_new_spec(pconn, queue):
    stored = echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {"v": 1})
    [first] = fire_queue(pconn, queue, now=stored.created_at + 2_000)
    echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {"v": 2})
    [listed] = echomq.schedules(pconn, queue)
    assert listed.payload == {"v": 2} and listed.last_fire_at == int(first.rsplit("-", 1)[1])
    assert fire_queue(pconn, queue, now=stored.created_at + 2_000) == []
    [second] = fire_queue(pconn, queue, now=stored.created_at + 9_000)
    assert echomq.get_job(pconn, queue, second).payload == {"v": 2}  # type: ignore[union-attr]


def test_a_paused_schedule_fires_nothing_and_resumed_never_fires_what_it_missed(pconn, queue):
    stored = echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {"v": 1})
    assert len(fire_queue(pconn, queue, now=stored.created_at + 2_000)) == 1
    assert echomq.pause_schedule(pconn, queue, "tick") is True
    assert echomq.pause_schedule(pconn, queue, "tick") is False
    [paused] = echomq.schedules(pconn, queue)
    assert paused.paused and paused.next_fire_at is None and paused.paused_at is not None
    assert fire_queue(pconn, queue, now=stored.created_at + 60_000) == []
    echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {"v": 2})  # a deploy re-stores it
    assert echomq.schedules(pconn, queue)[0].paused
    # a fire time (a second boundary) passes on the server clock while it is paused
    wait_until(lambda: server_ms(pconn.redis) // 1000 > paused.paused_at // 1000, step=0.02)
    before = server_ms(pconn.redis)
    assert echomq.resume_schedule(pconn, queue, "tick") is True
    assert echomq.resume_schedule(pconn, queue, "tick") is False
    [resumed] = echomq.schedules(pconn, queue)
    assert not resumed.paused and resumed.next_fire_at is not None
    fired = fire_queue(pconn, queue, now=server_ms(pconn.redis))
    assert all(int(i.rsplit("-", 1)[1]) >= before for i in fired)
    with pytest.raises(echomq.ScheduleGone, match="no cron schedule 'nope'"):
        echomq.pause_schedule(pconn, queue, "nope")


def test_a_schedule_lists_the_jobs_of_its_latest_fires(pconn, queue):
    stored = echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {})
    times = [stored.created_at // 1000 * 1000 + k * 1000 for k in range(2, 15)]
    for at in times:
        assert fire_queue(pconn, queue, now=at) == [f"cron-tick-{at}"]
    [listed] = echomq.schedules(pconn, queue)
    assert listed.recent_fires == tuple(reversed(times))[:10]
    assert listed.recent_job_ids[0] == f"cron-tick-{times[-1]}"
    echomq.unschedule(pconn, queue, "tick")
    assert pconn.redis.hgetall(pconn.keys(queue).schedule_fires) == {}


def test_unschedule_stops_the_fires_and_unlists_the_queue(pconn, queue):
    stored = echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {})
    assert pconn.redis.smembers(pconn.cron_set) == {queue}
    assert len(fire_due(pconn, now=stored.created_at + 1_000)) == 1
    assert echomq.unschedule(pconn, queue, "tick") is True
    assert echomq.unschedule(pconn, queue, "tick") is False
    assert fire_due(pconn, now=stored.created_at + 3_600_000) == []
    assert echomq.schedules(pconn, queue) == []
    assert pconn.redis.smembers(pconn.cron_set) == set()
    assert len(fired_ids(pconn, queue)) == 1  # what it enqueued before stays


def test_an_obliterated_queue_leaves_the_cron_set_at_the_next_pass(pconn, queue):
    echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {})
    assert echomq.obliterate(pconn, queue) >= 1
    assert echomq.schedules(pconn, queue) == []
    assert pconn.redis.smembers(pconn.cron_set) == {queue}
    assert fire_due(pconn) == []
    assert pconn.redis.smembers(pconn.cron_set) == set()


def test_two_prefixes_keep_separate_schedules(server_url, executor, queue):
    a = echomq.connect(server_url, executor=executor, prefix=f"ta{uuid.uuid4().hex[:6]}")
    b = echomq.connect(server_url, executor=executor, prefix=f"tb{uuid.uuid4().hex[:6]}")
    stored = echomq.schedule(a, queue, "tick", EVERY_SECOND, {"tenant": "a"})
    now = stored.created_at + 10_000
    assert echomq.schedules(b, queue) == []
    assert fire_due(b, now=now) == []
    assert fired_ids(b, queue) == []
    assert len(fire_due(a, now=now)) == 1
    echomq.schedule(b, queue, "tick", EVERY_SECOND, {"tenant": "b"})
    assert [s.payload for s in echomq.schedules(a, queue)] == [{"tenant": "a"}]
    assert echomq.unschedule(b, queue, "tick") and len(echomq.schedules(a, queue)) == 1
    a.close()
    b.close()


# -- fired once -----------------------------------------------------------------------


def test_a_scheduler_that_was_down_fires_what_it_missed_once(pconn, queue):
    stored = echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {})
    later = stored.created_at + 3 * 3_600_000  # three hours of missed seconds
    assert fire_due(pconn, now=later) == [f"cron-tick-{later // 1000 * 1000}"]
    assert fire_due(pconn, now=later) == []
    assert fire_due(pconn, now=later - 60_000) == []  # earlier than the last fire: nothing
    assert fired_ids(pconn, queue) == [f"cron-tick-{later // 1000 * 1000}"]
    [listed] = echomq.schedules(pconn, queue)
    assert listed.last_fire_at == later // 1000 * 1000


def test_a_fired_job_that_finished_and_was_purged_is_not_enqueued_again(pconn, queue):
    stored = echomq.schedule(pconn, queue, "tick", "*/5 * * * * *", {})
    now = stored.created_at + 12_000
    [job_id] = fire_due(pconn, now=now)
    [held] = echomq.claim(pconn, queue, lease_ms=10_000)
    echomq.complete(pconn, queue, held.id, held.token, "done")
    assert echomq.purge(pconn, queue, "completed") == 1
    assert echomq.get_job(pconn, queue, job_id) is None
    at = int(job_id.rsplit("-", 1)[1])
    for scheduler_clock in (now, at + 4_999):  # the same fire time is still the latest due
        assert fire_due(pconn, now=scheduler_clock) == []
    assert echomq.get_job(pconn, queue, job_id) is None
    assert echomq.counts(pconn, queue).pending == 0


def _scheduler_processes(conn: Connection, executor: str) -> list[subprocess.Popen[str]]:
    """Two real schedulers on the test's prefix: ``emq scheduler`` and a BatchScheduler
    started by ``python -c``, both ticking every 250 ms and logging what they fire."""
    env = {**os.environ, "EMQ_URL": conn.url, "EMQ_EXECUTOR": executor,
           "EMQ_PREFIX": conn.prefix}
    batch = (
        "import logging, os, signal, threading, echomq\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "conn = echomq.connect(os.environ['EMQ_URL'], executor=os.environ['EMQ_EXECUTOR'],"
        " prefix=os.environ['EMQ_PREFIX'])\n"
        "done = threading.Event()\n"
        "signal.signal(signal.SIGTERM, lambda *_: done.set())\n"
        "batch = echomq.BatchScheduler(conn)\n"
        "batch.add_cron(interval_ms=250)\n"
        "with batch:\n"
        "    done.wait()\n"
    )
    commands = [
        [sys.executable, "-m", "echomq", "--log-level", "INFO", "scheduler",
         "--cron-interval", "250ms"],
        [sys.executable, "-c", batch],
    ]
    return [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for cmd in commands]


@pytest.mark.slow
def test_two_scheduler_processes_enqueue_each_fire_time_once(pconn, executor, queue):
    stored = echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {"n": 1})
    procs = _scheduler_processes(pconn, executor)
    try:
        wait_until(lambda: len(fired_ids(pconn, queue)) >= 1, timeout=20)
        time.sleep(4)
    finally:
        stopping = server_ms(pconn.redis)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        try:
            logs = [ended(proc, 20)[0] for proc in procs]
        finally:
            for proc in procs:  # the other one too, when one of them hung
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
    stopped = server_ms(pconn.redis)
    assert [proc.returncode for proc in procs] == [0, 0], logs

    ids = fired_ids(pconn, queue)
    times = [int(i.rsplit("-", 1)[1]) for i in ids]
    assert all(later - earlier >= 1000 for earlier, later in zip(times, times[1:], strict=False))
    assert stored.created_at <= times[0] and times[-1] <= stopped
    # each process logs the ids IT enqueued: together every job, none twice
    reported = [job_id for log in logs
                for line in re.findall(r"cron fired (\[.*\])", log)
                for job_id in json.loads(line)]
    assert sorted(reported) == sorted(ids), logs
    # every second from the first fire to the stop fired (one may be coalesced)
    def ticks(until: int) -> int:
        return until // 1000 - times[0] // 1000 + 1

    assert ticks(stopping) - 1 <= len(ids) <= ticks(stopped), (ids, stopping, stopped)


RACER = """
import json, os, sys
import echomq
from echomq.scheduling.cron import fire_due
conn = echomq.connect(os.environ["EMQ_URL"], executor=os.environ["EMQ_EXECUTOR"],
                      prefix=os.environ["EMQ_PREFIX"])
start, ready, go = int(sys.argv[1]), sys.argv[2], sys.argv[3]
conn.redis.rpush(ready, 1)
while not conn.redis.blpop([go], timeout=1):  # short blocks: the client's socket timeout
    pass
fired = []
for tick in range(300):
    fired += fire_due(conn, now=start + tick * 1000)
print(json.dumps(fired))
"""


def test_two_processes_racing_over_one_fake_clock_enqueue_each_fire_once(pconn, executor, queue):
    """Both processes walk the same 300 seconds of a fake clock at full speed, started
    together, so they keep reading the same last fire and reaching for the same time:
    the transition alone decides who fires it."""
    stored = echomq.schedule(pconn, queue, "tick", EVERY_SECOND, {})
    start = (stored.created_at // 1000 + 1) * 1000
    ready, go = f"{pconn.prefix}:test-ready", f"{pconn.prefix}:test-go"
    env = {**os.environ, "EMQ_URL": pconn.url, "EMQ_EXECUTOR": executor,
           "EMQ_PREFIX": pconn.prefix}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(start), ready, go], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    try:
        # a poll, not one long BLPOP: two interpreters starting on a loaded machine may
        # take longer than redis-py's socket timeout (5 s)
        wait_until(lambda: pconn.redis.llen(ready) == 2, timeout=60)
        pconn.redis.rpush(go, 1, 1)
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.stdout and not proc.stdout.closed:  # a failed wait: none left behind
                proc.kill()
                proc.communicate()
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    reported = [job_id for out, _ in outputs for job_id in json.loads(out)]
    expected = [f"cron-tick-{start + tick * 1000}" for tick in range(300)]
    assert sorted(reported) == sorted(expected)  # every second once, none twice
    assert fired_ids(pconn, queue) == expected


# -- once per wall-clock time, across the two DST nights -----------------------------

PARIS = ZoneInfo("Europe/Paris")


def _dst_night(after_ms: int, month: int) -> int:
    """The epoch ms of the first Paris offset change in ``month`` after ``after_ms`` (March:
    spring forward, October: fall back), found from the zone data, not hard-coded."""
    year = datetime.fromtimestamp(after_ms / 1000, PARIS).year + 1
    second = int(datetime(year, month, 1, tzinfo=UTC).timestamp())
    offset = datetime.fromtimestamp(second, PARIS).utcoffset()
    while datetime.fromtimestamp(second + 3600, PARIS).utcoffset() == offset:
        second += 3600
    return (second + 3600) * 1000


def _fires(conn: Connection, queue: str, start: int, end: int, step_ms: int) -> list[int]:
    """Walk the fake clock from ``start`` to ``end`` as a scheduler ticking every
    ``step_ms`` would (the real firing path, cron_fire-4.lua); the fire times enqueued
    after ``start`` (the first pass catches up on the day before, coalesced: not counted)."""
    fire_queue(conn, queue, now=start)
    fired = []
    for now in range(start + step_ms, end + 1, step_ms):
        fired += [int(i.rsplit("-", 1)[1]) for i in fire_queue(conn, queue, now=now)]
    return fired


def _paris(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, PARIS).strftime("%m-%d %H:%M %Z")


def test_a_daily_schedule_fires_once_on_the_fall_back_night(pconn, queue):
    """Issue 20, item 14: 02:30 happens twice in Paris when the clocks fall back (CEST,
    then CET an hour later); the schedule fires at the first, never again that night."""
    stored = echomq.schedule(pconn, queue, "nightly", "30 2 * * *", {}, timezone="Europe/Paris")
    change = _dst_night(stored.created_at, 10)  # 01:00 UTC: 03:00 CEST becomes 02:00 CET
    fired = _fires(pconn, queue, change - 3 * 3_600_000, change + 26 * 3_600_000, 60_000)
    assert [_paris(t) for t in fired] == [_paris(change - 1_800_000),  # 02:30 CEST
                                          _paris(change + 24 * 3_600_000 + 1_800_000)]
    assert fired == [change - 1_800_000, change + 24 * 3_600_000 + 1_800_000]
    assert fired_ids(pconn, queue)[-2:] == [f"cron-nightly-{t}" for t in fired]
    [listed] = echomq.schedules(pconn, queue)
    assert listed.last_fire_at == fired[-1]


def test_a_scheduler_down_over_the_fall_back_night_fires_its_first_0230(pconn, queue):
    """Coalesced catch-up after the repeated hour: the one fire owed is the first 02:30,
    and the repeat is not owed afterwards either."""
    stored = echomq.schedule(pconn, queue, "nightly", "30 2 * * *", {}, timezone="Europe/Paris")
    change = _dst_night(stored.created_at, 10)
    [listed] = echomq.schedules(pconn, queue)
    assert fire_queue(pconn, queue, now=change + 2 * 3_600_000) == [
        f"cron-nightly-{change - 1_800_000}"]
    assert fire_queue(pconn, queue, now=change + 3 * 3_600_000) == []
    [listed] = echomq.schedules(pconn, queue)
    assert listed.next_fire_at == change + 24 * 3_600_000 + 1_800_000


def test_a_half_hourly_schedule_fires_each_wall_clock_time_once_when_clocks_fall_back(
        pconn, queue):
    """02:00 and 02:30 fire in CEST; their CET repeats do not; 03:00 CET fires on."""
    stored = echomq.schedule(pconn, queue, "half", "0,30 * * * *", {}, timezone="Europe/Paris")
    change = _dst_night(stored.created_at, 10)
    fired = _fires(pconn, queue, change - 2 * 3_600_000 - 60_000, change + 2 * 3_600_000,
                   60_000)
    assert [_paris(t)[6:] for t in fired] == [
        "01:00 CEST", "01:30 CEST", "02:00 CEST", "02:30 CEST",  # then 02:00, 02:30 CET: no
        "03:00 CET", "03:30 CET", "04:00 CET"]
    assert fired[4] - fired[3] == 5_400_000  # an hour and a half of real time between them


def test_a_daily_schedule_fires_once_on_the_spring_forward_night(pconn, queue):
    """02:30 does not exist when the clocks spring forward (02:00 CET becomes 03:00 CEST):
    the schedule fires once that day, at 03:30 CEST (CronTrigger's placement: the same
    time on the new offset), and at 02:30 CEST the next day."""
    stored = echomq.schedule(pconn, queue, "nightly", "30 2 * * *", {}, timezone="Europe/Paris")
    change = _dst_night(stored.created_at, 3)  # 01:00 UTC: 02:00 CET becomes 03:00 CEST
    fired = _fires(pconn, queue, change - 3 * 3_600_000, change + 26 * 3_600_000, 60_000)
    assert [_paris(t)[6:] for t in fired] == ["03:30 CEST", "02:30 CEST"]
    assert fired == [change + 1_800_000, change + 23 * 3_600_000 + 1_800_000]
