"""Issue 26, item 6: the archive's powers in the browser, through Starlette's test client
on a real Valkey (both executors: Replay runs the add script) and a real floor: an
archived job's payload, errors and log lines; Replay (POST, CSRF, refused in read-only
mode) to the same or another queue; the archive page's last fold, checkpoint time and
the bucket's last verify (a real S3 server, moto)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import echomq
from echomq.archive import Driver, Floor, declare, floor_notes, verify
from echomq.errors import EchoMQError
from echomq.queue.connection import Connection
from echomq.servers.moto import MotoS3
from echomq.web.timing import iso
from tests.support.archive import bucket_name, remote_on
from tests.web.test_routes import client, csrf_of

XSS = "<script>alert('x')</script>"


@pytest.fixture
def floor(tmp_path: Path) -> Iterator[Floor]:
    with Floor(tmp_path / "floor") as opened:
        yield opened


def archived(conn: Connection, queue: str, floor: Floor, *, payload: bool = True) -> str:
    """A job that failed once (an error and a log line), settled dead, folded, then
    purged from Redis: only the floor knows it."""
    declare(conn, queue, payload=payload)
    job_id = echomq.add(conn, queue, {"to": XSS, "n": 7}, name="mail", max_attempts=1)
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    echomq.append_log(conn, queue, job_id, held.token, f"log {XSS}")
    echomq.fail(conn, queue, job_id, held.token, ValueError(f"error {XSS}"))
    Driver(conn, floor, claim_custody=True).fold(queue)
    assert echomq.purge(conn, queue, "dead") == 1
    return job_id


def test_an_archived_job_shows_its_payload_errors_and_logs_as_text(
        conn: Connection, queue: str, floor: Floor) -> None:
    job_id = archived(conn, queue, floor)
    page = client(conn, floor).get("/job", params={"queue": queue, "job": job_id}).text
    assert 'id="from-archive"' in page and "<script>alert" not in page
    shown = re.search(r'<pre class="payload">(.*?)</pre>', page, re.S)
    assert shown and '"to": "<script>alert(\'x\')</script>"' in html.unescape(shown.group(1))
    assert "payload (mail)" in page
    debug = re.search(r'<tr class="archived-debug">(.*?)</tr>', page, re.S)
    assert debug and "<details open>" in debug.group(1)  # a forgotten job: shown open
    assert "error &lt;script&gt;" in debug.group(1) and "log &lt;script&gt;" in debug.group(1)
    assert 'id="replay-form"' in page and 'id="not-replayable"' not in page


def test_replay_creates_a_new_job_on_the_same_or_another_queue(
        conn: Connection, queue: str, floor: Floor) -> None:
    job_id = archived(conn, queue, floor)
    web = client(conn, floor)
    page = web.get("/job", params={"queue": queue, "job": job_id}).text
    csrf = csrf_of(page)
    fields = {"csrf": csrf, "queue": queue, "job": job_id}
    done = web.post("/archive/replay", data=fields, follow_redirects=False)
    assert done.status_code == 303
    new = echomq.list_jobs(conn, queue, "pending")
    assert len(new) == 1 and new[0].id != job_id
    assert new[0].payload == {"to": XSS, "n": 7} and new[0].replay_of == f"{queue}/{job_id}"
    landed = web.get(done.headers["location"]).text  # the new job's page, linked back
    assert f"replayed {job_id} of {queue} as {new[0].id} in {queue}" in landed
    assert re.search(r'id="job-replay-of"><a href="/job\?queue=[^"]+">', landed)
    other = queue + "-again"
    moved = web.post("/archive/replay", data={**fields, "to_queue": other},
                     follow_redirects=True)
    [copy] = echomq.list_jobs(conn, other, "pending")
    assert copy.payload == {"to": XSS, "n": 7} and f"as {copy.id} in {other}" in moved.text


def test_replay_is_refused_without_csrf_in_read_only_and_without_a_payload(
        conn: Connection, queue: str, floor: Floor) -> None:
    job_id = archived(conn, queue, floor)
    web = client(conn, floor)
    fields = {"queue": queue, "job": job_id}
    assert web.post("/archive/replay", data=fields).status_code == 403
    assert web.post("/archive/replay", data={**fields, "csrf": "forged"}).status_code == 403
    ro = client(conn, floor, read_only=True)
    page = ro.get("/job", params={"queue": queue, "job": job_id}).text
    assert 'id="replay-form"' not in page
    assert ro.post("/archive/replay", data={**fields, "csrf": csrf_of(
        web.get("/").text)}).status_code == 403
    assert echomq.counts(conn, queue).pending == 0
    bare = archived(conn, queue + "-bare", floor, payload=False)
    page = web.get("/job", params={"queue": queue + "-bare", "job": bare}).text
    assert 'id="replay-form"' not in page and 'id="not-replayable"' in page
    said = web.post("/archive/replay", data={"queue": queue + "-bare", "job": bare,
                                             "csrf": csrf_of(web.get("/").text)})
    assert "refused: PayloadNotRecorded" in said.text
    assert echomq.counts(conn, queue + "-bare").pending == 0


def test_the_archive_page_shows_the_last_fold_the_checkpoint_time_and_verify(
        rconn: Connection, queue: str, floor: Floor, moto: MotoS3) -> None:
    conn = rconn  # the archive page does not depend on the executor
    declare(conn, queue)
    echomq.add(conn, queue, {"n": 1}, job_id="a")
    [held] = echomq.claim(conn, queue)
    echomq.complete(conn, queue, held.id, held.token, 1)
    remote = remote_on(moto, bucket_name(), "archive/", retries=2, backoff_s=0.01)
    Driver(conn, floor, remote, claim_custody=True).fold(queue)
    web = client(conn, floor)

    def row() -> str:
        page = web.get("/archive", params={"q": queue}).text
        found = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', page, re.S)
        assert found, page
        return found.group(1)

    cells = row()
    checkpoint = floor.checkpoint(queue)
    stamp = re.search(r'<td class="checkpoint"><time datetime="([^"]+)"', cells)
    assert stamp and checkpoint in cells
    assert stamp.group(1) == iso(int(checkpoint.split("-")[0]))
    assert re.search(r'<td class="last-fold"><time [^>]+>(now|[^<]+ ago)</time>'
                     r'<br><small class="hint">took \d', cells)
    assert '<td class="verify">none</td>' in cells
    verify(remote, [queue], progress=False, floor=floor)
    cells = row()
    assert re.search(r'<td class="verify"><span class="badge state-completed">ok</span>',
                     cells) and "1 slice(s)" in cells
    assert floor_notes.last_verify(floor, queue)["ok"] is True  # type: ignore[index]
    [ref] = remote.list_slices(queue)
    remote.delete_slice(ref)  # the bucket lost what the floor uploaded
    with pytest.raises(EchoMQError):
        verify(remote, [queue], progress=False, floor=floor)
    cells = row()
    assert re.search(r'<td class="verify"><span class="badge state-dead">failed</span>',
                     cells), cells


def test_the_last_outcome_is_found_from_the_end_of_a_jobs_keys(
        rconn: Connection, queue: str, floor: Floor) -> None:
    """What Replay takes (and the page offers it on): the LAST outcome, not a job whose id
    extends this one's, however many times the job settled."""
    declare(rconn, queue, payload=True)
    for job_id, n in (("a", 1), ("a-b", 2), ("b", 3)):
        echomq.add(rconn, queue, {"n": n}, job_id=job_id, max_attempts=1)
        [held] = echomq.claim(rconn, queue)
        echomq.fail(rconn, queue, held.id, held.token, "boom")
    assert echomq.retry_dead(rconn, queue, ["a"]) == 1
    [held] = echomq.claim(rconn, queue)
    echomq.complete(rconn, queue, held.id, held.token, "second")
    Driver(rconn, floor, claim_custody=True).fold(queue)
    last = floor_notes.last_outcome(floor, queue, "a")
    assert last is not None and last.outcome.value == "completed" and last.result == '"second"'
    assert floor_notes.last_outcome(floor, queue, "a-b").payload_value == {"n": 2}  # type: ignore[union-attr]
    assert floor_notes.last_outcome(floor, queue, "b").payload_value == {"n": 3}  # type: ignore[union-attr]
    assert floor_notes.last_outcome(floor, queue, "c") is None
    assert floor_notes.last_outcome(floor, queue + "x", "a") is None
