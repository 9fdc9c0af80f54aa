"""Replay from the archive: a queue declared with ``payload=True`` records each job's name
and payload with its outcome, so ``archive.replay`` enqueues it again from the floor alone,
long after Redis forgot it; refused when the payload was not recorded. On both executors,
since the settle scripts write the entries."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import echomq
from echomq.archive import (
    Driver,
    Floor,
    JobNotArchived,
    PayloadNotRecorded,
    PayloadUnreadable,
    declare,
    records_payload,
    replay,
    undeclare,
)
from echomq.archive.entries import ArchivedEntry, parse_entry
from echomq.cli import main as emq
from tests.support.waits import wait_lapsed, wait_until


@contextmanager
def consumer(conn: echomq.Connection, queue: str, handler: Callable[[Any], Any]
             ) -> Iterator[echomq.Consumer]:
    """A real recording Consumer in a thread, stopped on exit."""
    worker = echomq.Consumer(conn, queue, handler, record=True, poll_ms=50, concurrency=2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(15)
        assert not thread.is_alive()


def fold(conn: echomq.Connection, queue: str, floor: Path) -> None:
    driver = Driver(conn, floor, slice_count=50, claim_custody=True)
    try:
        driver.fold(queue)
    finally:
        driver.close()


def settle_one(conn: echomq.Connection, queue: str, payload: Any, name: str = "mail") -> str:
    job_id = echomq.add(conn, queue, payload, name=name)
    [job] = echomq.claim(conn, queue, lease_ms=10_000, count=1)
    echomq.complete(conn, queue, job.id, job.token, {"ok": True})
    return job_id


def test_a_replay_after_redis_purged_the_job(conn: echomq.Connection, queue: str,
                                             tmp_path: Path) -> None:
    declare(conn, queue, payload=True)
    seen: list[tuple[str, Any]] = []

    def handler(job: Any) -> Any:
        seen.append((job.id, job.payload))
        if job.payload.get("explode"):
            raise ValueError("boom")
        return {"sent": job.payload["to"]}

    ok = echomq.add(conn, queue, {"to": "ada@example.org", "n": [1, 2]}, name="mail")
    bad = echomq.add(conn, queue, {"to": "bob", "explode": True}, name="mail",
                     max_attempts=1)
    with consumer(conn, queue, handler):
        wait_until(lambda: echomq.counts(conn, queue).as_dict()["completed"] == 1
                   and echomq.counts(conn, queue).as_dict()["dead"] == 1)
        # the recording Consumer's declare kept the declaration's payload recording
        assert records_payload(conn, queue)
    floor = tmp_path / "floor"
    fold(conn, queue, floor)
    assert echomq.purge(conn, queue, "completed") == 1
    assert echomq.purge(conn, queue, "dead") == 1
    assert echomq.get_job(conn, queue, ok) is None and echomq.get_job(conn, queue, bad) is None

    with Floor(floor) as opened:
        [entry] = opened.history(queue, ok)
        assert (entry.name, entry.payload_value) == ("mail", {"to": "ada@example.org",
                                                              "n": [1, 2]})
        again = replay(conn, opened, queue, ok)
    dead_again = replay(conn, str(floor), queue, bad)  # a path works as well as a Floor
    assert again not in (ok, bad) and dead_again not in (ok, bad, again)
    job = echomq.get_job(conn, queue, again)
    assert job is not None and job.state == echomq.JobState.PENDING
    assert (job.payload, job.name, job.replay_of) == (
        {"to": "ada@example.org", "n": [1, 2]}, "mail", f"{queue}/{ok}")
    redead = echomq.get_job(conn, queue, dead_again)
    assert redead is not None and redead.replay_of == f"{queue}/{bad}"

    seen.clear()
    with consumer(conn, queue, handler):
        wait_until(lambda: echomq.counts(conn, queue).as_dict()["completed"] == 1
                   and echomq.counts(conn, queue).as_dict()["dead"] == 1)
    # the replayed failure is a new job with the default tries: it died again, three times
    assert dict(seen) == {again: {"to": "ada@example.org", "n": [1, 2]},
                          dead_again: {"to": "bob", "explode": True}}
    done = echomq.get_job(conn, queue, again)
    assert done is not None and done.result == {"sent": "ada@example.org"}


def test_replay_takes_the_last_archived_outcome(conn: echomq.Connection, queue: str,
                                                tmp_path: Path) -> None:
    declare(conn, queue, payload=True)
    job_id = echomq.add(conn, queue, {"v": 1}, job_id="fixed", name="first")
    [job] = echomq.claim(conn, queue, lease_ms=10_000, count=1)
    echomq.complete(conn, queue, job.id, job.token, "done")
    fold(conn, queue, tmp_path / "floor")
    echomq.purge(conn, queue, "completed")
    echomq.add(conn, queue, {"v": 2}, job_id="fixed", name="second")
    [job] = echomq.claim(conn, queue, lease_ms=10_000, count=1)
    echomq.fail(conn, queue, job.id, job.token, "nope")  # retrying: no outcome recorded
    [job] = wait_until(lambda: echomq.claim(conn, queue, lease_ms=10_000, count=1), 10)
    echomq.complete(conn, queue, job.id, job.token, "done again")
    fold(conn, queue, tmp_path / "floor")
    new = replay(conn, tmp_path / "floor", queue, job_id)
    found = echomq.get_job(conn, queue, new)
    assert found is not None and (found.payload, found.name) == ({"v": 2}, "second")


def test_replay_is_refused_without_payload_recording(conn: echomq.Connection, queue: str,
                                                     tmp_path: Path) -> None:
    declare(conn, queue)
    assert not records_payload(conn, queue)
    job_id = settle_one(conn, queue, {"secret": "x"})
    entries = conn.redis.xrange(conn.keys(queue).completions)
    assert [sorted(f) for _, f in entries] == [
        ["at", "attempts", "created_at", "job", "outcome", "result", "started_at"]]
    fold(conn, queue, tmp_path / "floor")
    with pytest.raises(PayloadNotRecorded, match="payload=True"):
        replay(conn, tmp_path / "floor", queue, job_id)
    with pytest.raises(JobNotArchived):
        replay(conn, tmp_path / "floor", queue, "never-ran")
    with pytest.raises(JobNotArchived, match="no floor"):
        replay(conn, tmp_path / "nowhere", queue, job_id)
    assert not (tmp_path / "nowhere").exists()  # a wrong path is not made a floor
    assert echomq.counts(conn, queue).as_dict()["pending"] == 0


@pytest.mark.parametrize("payload", ["not json {", "[" * 100_000 + "]" * 100_000])
def test_a_recorded_payload_that_is_not_json_is_refused_clearly(
        conn: echomq.Connection, queue: str, tmp_path: Path, payload: str) -> None:
    """Another writer's entry in the outcome stream: its payload is kept in the floor as
    written, and a replay names the entry instead of failing inside the JSON parser."""
    declare(conn, queue, payload=True)
    sid = conn.redis.xadd(conn.keys(queue).completions, {
        "job": "foreign", "outcome": "completed", "result": "{}", "attempts": "1",
        "at": "1700000000000", "created_at": "1700000000000", "name": "mail",
        "payload": payload})
    fold(conn, queue, tmp_path / "floor")
    with pytest.raises(PayloadUnreadable, match=f"entry {sid}.*nothing was enqueued"):
        replay(conn, tmp_path / "floor", queue, "foreign")
    assert echomq.counts(conn, queue).as_dict()["pending"] == 0


def test_replay_to_another_queue(conn: echomq.Connection, queue: str, tmp_path: Path) -> None:
    declare(conn, queue, payload=True)
    job_id = settle_one(conn, queue, {"n": 7}, name="resize")
    fold(conn, queue, tmp_path / "floor")
    other = f"{queue}-replays"
    new = replay(conn, tmp_path / "floor", queue, job_id, to_queue=other)
    assert echomq.get_job(conn, queue, new) is None or new == job_id
    moved = echomq.get_job(conn, other, new)
    assert moved is not None and (moved.payload, moved.name, moved.replay_of) == (
        {"n": 7}, "resize", f"{queue}/{job_id}")
    assert echomq.counts(conn, queue).as_dict()["pending"] == 0


def test_the_declaration_keeps_payload_recording_until_told(conn: echomq.Connection,
                                                            queue: str) -> None:
    declare(conn, queue, payload=True)
    declare(conn, queue)  # what a recording Consumer does: options unchanged
    with consumer(conn, queue, lambda job: None):
        wait_until(lambda: echomq.archive.is_declared(conn, queue))
    assert records_payload(conn, queue)
    settle_one(conn, queue, {"a": 1})
    declare(conn, queue, payload=False)
    assert not records_payload(conn, queue)
    settle_one(conn, queue, {"a": 2})
    fields = [f for _, f in conn.redis.xrange(conn.keys(queue).completions)]
    assert [(f.get("name"), f.get("payload")) for f in fields] == [
        ("mail", '{"a":1}'), (None, None)]
    declare(conn, queue, payload=True)
    undeclare(conn, queue)  # stops payload recording too
    assert not records_payload(conn, queue)


def test_dead_letters_carry_the_payload(conn: echomq.Connection, queue: str) -> None:
    """fail-3.lua and stalled_check-3.lua record the name and payload too."""
    declare(conn, queue, payload=True)
    failing = echomq.add(conn, queue, {"f": 1}, name="f", max_attempts=1)
    [job] = echomq.claim(conn, queue, lease_ms=10_000, count=1)
    assert echomq.fail(conn, queue, job.id, job.token, "broken") == "dead"
    stalling = echomq.add(conn, queue, {"s": [2]}, max_attempts=1)
    [held] = echomq.claim(conn, queue, lease_ms=1, count=1)
    wait_lapsed(conn.redis, queue, held.id)
    assert echomq.stalled_check(conn, queue, max_stalled=1).dead == [stalling]
    fields = {f["job"]: f for _, f in conn.redis.xrange(conn.keys(queue).completions)}
    assert (fields[failing]["name"], fields[failing]["payload"]) == ("f", '{"f":1}')
    assert "name" not in fields[stalling] and fields[stalling]["payload"] == '{"s":[2]}'
    assert fields[stalling]["result"] == "stalled"


def test_entries_with_and_without_payload_parse() -> None:
    old = parse_entry("q", "1-0", {"job": "a", "outcome": "completed", "result": "r",
                                   "attempts": "1", "at": "5"})
    new = parse_entry("q", "2-0", {"job": "a", "outcome": "dead", "result": "e",
                                   "attempts": "1", "at": "6", "name": "n",
                                   "payload": '{"x":1}'})
    assert isinstance(old, ArchivedEntry) and isinstance(new, ArchivedEntry)
    assert (old.name, old.payload, old.payload_value, old.extra) == (None, None, None, ())
    assert (new.name, new.payload_value, new.extra) == ("n", {"x": 1}, ())
    assert "payload" not in old.to_dict() and new.to_dict()["payload"] == '{"x":1}'


def test_emq_archive_replay(conn: echomq.Connection, queue: str, server_url: str,
                            tmp_path: Path) -> None:
    runner = CliRunner()
    floor = str(tmp_path / "floor")
    declared = runner.invoke(emq, ["--url", server_url, "archive", "declare", queue,
                                   "--payload"])
    assert declared.exit_code == 0, declared.output
    assert records_payload(conn, queue)
    job_id = settle_one(conn, queue, {"cli": True})
    fold(conn, queue, tmp_path / "floor")
    out = runner.invoke(emq, ["--url", server_url, "archive", "replay", "-q", queue, job_id,
                              "--floor", floor, "--to-queue", f"{queue}-b", "--json"])
    assert out.exit_code == 0, out.output
    import json

    answer = json.loads(out.output)
    assert answer["queue"] == f"{queue}-b" and answer["replay_of"] == f"{queue}/{job_id}"
    job = echomq.get_job(conn, f"{queue}-b", answer["job_id"])
    assert job is not None and job.payload == {"cli": True}
    missing = runner.invoke(emq, ["--url", server_url, "archive", "replay", "-q", queue,
                                  "nope", "--floor", floor])
    assert missing.exit_code == 1 and "holds no outcome" in missing.output
