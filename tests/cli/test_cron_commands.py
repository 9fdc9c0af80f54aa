"""``emq schedule``, ``emq unschedule`` and ``emq schedules``: store, list (``--json``)
and remove cron schedules; refuse what ``echomq.schedule`` refuses, with one line."""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner, Result

import echomq
from echomq.cli import main
from echomq.scheduling.cron import fire_due


@pytest.fixture
def prefix() -> str:
    return f"clicron{uuid.uuid4().hex[:8]}"


def emq(url: str, executor: str, prefix: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--url", url, "--executor", executor, "--prefix", prefix,
                                     *args])


def test_schedule_list_fire_and_unschedule_from_the_shell(server_url, executor, prefix, queue):
    done = emq(server_url, executor, prefix, "schedule", "-q", queue, "nightly", "0 3 * * *",
               '{"report": true}', "--timezone", "Europe/Paris", "--priority", "2",
               "--job-name", "report", "--json")
    assert done.exit_code == 0, done.output
    stored = json.loads(done.output)
    assert (stored["name"], stored["cron"], stored["timezone"]) == (
        "nightly", "0 3 * * *", "Europe/Paris")
    assert stored["options"]["priority"] == 2 and stored["last_fire"] is None
    assert stored["next_fire"].endswith("+00:00")

    listed = emq(server_url, executor, prefix, "schedules", "-q", queue, "--json")
    assert [row["name"] for row in json.loads(listed.output)] == ["nightly"]
    conn = echomq.connect(server_url, executor=executor, prefix=prefix)
    [job_id] = fire_due(conn, now=echomq.schedules(conn, queue)[0].next_fire_at)
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and (job.payload, job.name) == ({"report": True}, "report")
    table = emq(server_url, executor, prefix, "schedules", "-q", queue)
    assert table.output.startswith("nightly\t0 3 * * *\tEurope/Paris\tnext ")
    assert "last -" not in table.output  # it fired

    gone = emq(server_url, executor, prefix, "unschedule", "-q", queue, "nightly", "--json")
    assert gone.exit_code == 0 and json.loads(gone.output) == {"name": "nightly",
                                                               "removed": True}
    again = emq(server_url, executor, prefix, "unschedule", "-q", queue, "nightly")
    assert again.exit_code == 1 and "removed: False" in again.output
    assert emq(server_url, executor, prefix, "schedules", "-q", queue).output == "no schedules\n"
    conn.close()


@pytest.mark.parametrize(("args", "words"), [
    (("n", "* * *"), "3 fields"),
    (("n", "* * * * *", "--timezone", "Nowhere/Land"), "Nowhere/Land"),
    (("bad:name", "* * * * *"), "schedule name"),
    (("n", "* * * * *", "{not json"), "payload is not JSON"),
    (("n", "* * * * *", "--priority", "2000"), "priority"),
])
def test_schedule_refuses_bad_input_with_one_line(server_url, executor, prefix, queue, args,
                                                  words):
    done = emq(server_url, executor, prefix, "schedule", "-q", queue, *args)
    assert done.exit_code != 0
    assert words in done.output and "Traceback" not in done.output
    assert emq(server_url, executor, prefix, "schedules", "-q", queue, "--json").output == "[]\n"


def test_each_cron_command_says_what_it_refuses():
    for command in ("schedule", "unschedule", "schedules"):
        done = CliRunner().invoke(main, [command, "--help"])
        assert done.exit_code == 0 and "refuses" in done.output.lower(), command


def test_pause_and_resume_a_schedule_from_the_shell(server_url, executor, prefix, queue):
    emq(server_url, executor, prefix, "schedule", "-q", queue, "tick", "* * * * *")
    paused = emq(server_url, executor, prefix, "pause-schedule", "-q", queue, "tick", "--json")
    assert paused.exit_code == 0 and json.loads(paused.output)["changed"] is True
    listed = emq(server_url, executor, prefix, "schedules", "-q", queue, "--json")
    assert json.loads(listed.output)[0]["paused"] is True
    resumed = emq(server_url, executor, prefix, "resume-schedule", "-q", queue, "tick")
    assert resumed.exit_code == 0
    conn = echomq.connect(server_url, executor=executor, prefix=prefix)
    assert not echomq.schedules(conn, queue)[0].paused
    missing = emq(server_url, executor, prefix, "pause-schedule", "-q", queue, "nope")
    assert missing.exit_code == 1 and "no cron schedule 'nope'" in missing.output


def test_workers_lists_the_heartbeat_records(server_url, executor, prefix, queue):
    from echomq.worker.heartbeat import Heartbeat

    conn = echomq.connect(server_url, executor=executor, prefix=prefix)
    assert emq(server_url, executor, prefix, "workers").output == "no worker beat lately\n"
    record = Heartbeat(conn, [queue], 3, beat_ms=60_000)
    record.beat([(queue, "j-1", 1)])
    found = emq(server_url, executor, prefix, "workers", "-q", queue, "--json")
    [row] = json.loads(found.output)
    assert (row["id"], row["queues"], row["held"], row["status"]) == (
        record.id, [queue], 1, "alive")
    assert "\tpid " in emq(server_url, executor, prefix, "workers").output
    record.leave()
