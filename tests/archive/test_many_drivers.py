"""Many archive drivers over one deployment's declared queues: each queue folded by one
driver at a time, every queue's history in the bucket exactly once and in order, a killed
driver's queues taken over within one lease, a stalled one trimming nothing.

The process tests run real driver processes (``drivers_child.py``) with floors of their
own and one SeaweedFS bucket; the others drive two ``Driver`` objects in this process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from echomq.archive import Driver, Floor, S3Remote, declare, restore
from echomq.archive.fold_lease import FoldLease
from echomq.queue.connection import Connection, connect
from echomq.servers.seaweed import SeaweedS3
from tests.support.archive import bucket_name, floor_ids, folded_ids, remote_on, remote_spec
from tests.support.recorder import Recorder
from tests.support.waits import wait_until

CHILD = str(Path(__file__).with_name("drivers_child.py"))
LEASE_MS = 5_000
BENIGN = ("LeaseLost", "RemoteConflict")
"""What a fold may fail with while drivers hand queues over on a loaded machine (a lease
that lapsed mid-fold, a manifest another driver moved first): the next pass repairs it."""


@pytest.fixture
def tenant(server_url: str) -> Iterator[Connection]:
    """A connection under a prefix of the test's own: its declared queues and its roster
    of drivers are nobody else's."""
    conn = connect(server_url, prefix=f"drv-{uuid.uuid4().hex[:8]}")
    yield conn
    conn.close()


def recorders(conn: Connection, count: int) -> dict[str, Recorder]:
    recs = {}
    for i in range(count):
        queue = f"q{i:02d}"
        declare(conn, queue)
        rec = Recorder(conn, queue)
        rec.key = conn.keys(queue).completions  # under the tenant's prefix
        recs[queue] = rec
    return recs


class Fleet:
    """Driver processes, each with its own floor, and every line they print."""

    def __init__(self, conn: Connection, url: str, remote: S3Remote, server: SeaweedS3,
                 tmp: Path) -> None:
        self.conn, self.url, self.tmp = conn, url, tmp
        self.remote_spec = remote_spec(remote, server)
        self.stop_file = tmp / "stop"
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}

    def start(self, name: str, **fault: dict[str, object]) -> None:
        spec = {"url": self.url, "prefix": self.conn.prefix, "floor": str(self.floor(name)),
                "remote": self.remote_spec, "name": name, "lease_ms": LEASE_MS,
                "slice_count": 20, "interval_s": 0.1, "stop_file": str(self.stop_file),
                **fault}
        with open(self.tmp / f"{name}.err", "w") as err:  # never a full pipe
            proc = subprocess.Popen([sys.executable, CHILD, json.dumps(spec)],
                                    stdout=subprocess.PIPE, stderr=err, text=True)
        self.procs[name], self.events[name] = proc, []
        threading.Thread(target=self._read, args=(proc, self.events[name]), daemon=True).start()

    def wait_started(self) -> None:
        """Every driver has made its first pass (imports take seconds on a busy machine)."""
        wait_until(lambda: all(self.event(n, "pass") for n in self.procs), timeout=90,
                   step=0.1)

    def floor(self, name: str) -> Path:
        return self.tmp / f"floor-{name}"

    @staticmethod
    def _read(proc: subprocess.Popen[str], into: list[dict[str, Any]]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                into.append(json.loads(line))

    def folds(self, name: str, queue: str, after: float = 0.0) -> list[dict[str, Any]]:
        """The reports of ``name``'s passes after ``after`` in which it folded ``queue``."""
        return [dict(r, t=e["t"]) for e in list(self.events[name])
                if e["event"] == "pass" and e["t"] > after
                for r in e["reports"] if r["queue"] == queue and r["skipped"] is None]

    def event(self, name: str, kind: str) -> dict[str, Any] | None:
        return next((e for e in list(self.events[name]) if e["event"] == kind), None)

    def stop(self) -> None:
        self.stop_file.touch()
        for name, proc in self.procs.items():
            if proc.poll() is None:
                proc.wait(timeout=60)
                assert proc.returncode == 0, self.stderr(name)

    def stderr(self, name: str) -> str:
        return (self.tmp / f"{name}.err").read_text()[-3000:]

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def traffic(recs: dict[str, Recorder], until: Any, seconds: float) -> None:
    """A few outcomes into every queue, every 50 ms, until ``until()`` or ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        for rec in recs.values():
            rec.add(3, at=int(time.time() * 1000))
        time.sleep(0.05)


def drained(recs: dict[str, Recorder]) -> bool:
    return all(rec.conn.redis.xlen(rec.key) == 0 for rec in recs.values())


def assert_exactly_once(recs: dict[str, Recorder], remote: S3Remote, tmp: Path) -> None:
    """The bucket alone restores every queue's history exactly as it was settled."""
    reports = restore(remote, tmp / "restored", sorted(recs), progress=False)
    with Floor(tmp / "restored") as floor:
        for queue, rec in recs.items():
            written = rec.written_ids()
            assert folded_ids(remote, queue) == written, queue  # once each, in order
            assert reports[queue].entries == len(written)
            audit = floor.audit(queue)
            assert [(e.stream_id, e.job_id) for e in audit] == [
                (sid, fields["job"]) for sid, fields in sorted(
                    rec.written, key=lambda w: [int(p) for p in w[0].split("-")])]
            assert audit.gaps == ()


@pytest.mark.slow
def test_three_drivers_share_twelve_queues_and_a_killed_ones_queues_move_on(
        tenant: Connection, server_url: str, seaweed: SeaweedS3, tmp_path: Path) -> None:
    remote = remote_on(seaweed, bucket_name(), "archive/", retries=2, backoff_s=0.01)
    recs = recorders(tenant, 12)
    fleet = Fleet(tenant, server_url, remote, seaweed, tmp_path)
    try:
        for name in ("a", "b"):  # started together with c
            fleet.start(name)
        # killed between an upload and its trim, in its fourth pass
        fleet.start("c", kill={"point": "after_upload", "at": 3, "passes": 3})
        fleet.wait_started()
        traffic(recs, lambda: fleet.procs["c"].poll() is not None, 90)
        assert fleet.procs["c"].wait(timeout=30) == -signal.SIGKILL, fleet.stderr("c")
        killed = fleet.event("c", "kill")
        assert killed is not None
        held = {r["queue"] for e in fleet.events["c"] if e["event"] == "pass"
                for r in e["reports"] if r["skipped"] is None} | {killed["queue"]}
        traffic(recs, lambda: False, 1.0)  # the others go on while c's leases lapse

        # Every queue c was folding is folded by a or b within one lease of its death
        # (plus a pass of theirs and this machine's slack).
        def taken_over() -> bool:
            return all(fleet.folds("a", q, killed["t"]) + fleet.folds("b", q, killed["t"])
                       for q in held)
        wait_until(taken_over, timeout=LEASE_MS / 1000 + 30, step=0.1)
        first = min(f["t"] for q in [killed["queue"]]
                    for f in fleet.folds("a", q, killed["t"]) + fleet.folds("b", q, killed["t"]))
        print(f"c died folding {killed['queue']} (held {sorted(held)}); taken over after "
              f"{first - killed['t']:.2f}s")
        assert first - killed["t"] < LEASE_MS / 1000 + 20

        wait_until(lambda: drained(recs), timeout=60, step=0.1)
        fleet.stop()
    finally:
        fleet.kill_all()
    # the work was shared: each driver folded queues of its own (c uploaded slices of
    # its own before it died: it was killed at its third upload)
    for name in ("a", "b"):
        assert any(r["entries"] for e in fleet.events[name] if e["event"] == "pass"
                   for r in e["reports"]), name
    errors = [r["error"] for name in ("a", "b") for e in fleet.events[name]
              if e["event"] == "pass" for r in e["reports"] if r["error"]]
    assert all(any(b in e for b in BENIGN) for e in errors), errors
    assert_exactly_once(recs, remote, tmp_path)


@pytest.mark.slow
def test_a_driver_stalled_past_its_lease_trims_nothing(
        tenant: Connection, server_url: str, seaweed: SeaweedS3, tmp_path: Path) -> None:
    remote = remote_on(seaweed, bucket_name(), "archive/", retries=2, backoff_s=0.01)
    recs = recorders(tenant, 4)
    fleet = Fleet(tenant, server_url, remote, seaweed, tmp_path)
    try:
        fleet.start("a", stall={"point": "before_trim", "at": 2, "passes": 3})  # about to trim
        fleet.start("b")
        fleet.wait_started()
        traffic(recs, lambda: fleet.event("a", "stall") is not None, 90)
        stalled = fleet.event("a", "stall")
        assert stalled is not None
        queue = stalled["queue"]

        def b_trimmed() -> bool:  # b took the queue over and trimmed past a's slice
            return any(e["event"] == "trim" and e["queue"] == queue and e["t"] > stalled["t"]
                       for e in list(fleet.events["b"]))
        traffic(recs, b_trimmed, LEASE_MS / 1000 + 40)
        assert b_trimmed()
        os.kill(fleet.procs["a"].pid, signal.SIGCONT)
        wait_until(lambda: fleet.folds("a", queue, stalled["t"]), timeout=40, step=0.05)
        resumed = fleet.folds("a", queue, stalled["t"])[0]  # the stalled fold's report
        assert "LeaseLost" in (resumed["error"] or "")
        assert not any(e["event"] == "trim" and e["queue"] == queue
                       and stalled["t"] < e["t"] <= resumed["t"] for e in fleet.events["a"])
        traffic(recs, lambda: False, 1.0)
        wait_until(lambda: drained(recs), timeout=60, step=0.1)
        fleet.stop()
    finally:
        fleet.kill_all()
    assert_exactly_once(recs, remote, tmp_path)
    # a's floor catches up from the bucket when it folds the queue again
    driver = Driver(tenant, fleet.floor("a"), remote, wait_ms=5_000)
    try:
        report = driver.fold(queue)
    finally:
        driver.close()
    assert report.error is None
    with Floor(fleet.floor("a")) as floor:
        assert floor_ids(floor, queue) == recs[queue].written_ids()
        assert floor.gaps(queue) == []


# -- in one process: two Driver objects ----------------------------------------------------

def test_a_floor_whose_queue_moved_on_mid_fold_drops_its_slices_and_catches_up(
        tenant: Connection, remote: S3Remote, tmp_path: Path) -> None:
    rec = recorders(tenant, 1)["q00"]
    rec.add(30)

    def die(point: str) -> None:
        if point == "after_floor_commit":
            raise KeyboardInterrupt  # killed after its floor commit, before the upload

    a = Driver(tenant, tmp_path / "a", remote, slice_count=10, hook=die, name="a")
    with pytest.raises(KeyboardInterrupt):
        a.fold(rec.queue)
    assert a.floor.status(rec.queue).pending == 1
    b = Driver(tenant, tmp_path / "b", remote, slice_count=7, name="b")
    assert b.fold(rec.queue).trimmed == 30  # other slice boundaries than a's
    rec.add(5)
    a.hook = None
    report = a.fold(rec.queue)
    assert (report.error, report.dropped, report.pulled, report.entries) == (None, 1, 5, 5)
    assert floor_ids(a.floor, rec.queue) == rec.written_ids()
    status = a.floor.status(rec.queue)
    assert (status.entries, status.pending, status.gaps) == (35, 0, 0)
    assert folded_ids(remote, rec.queue) == rec.written_ids()
    assert b.fold(rec.queue).pulled == 1  # and b takes a's newest slice
    assert floor_ids(b.floor, rec.queue) == rec.written_ids()
    a.close()
    b.close()


def test_fold_declared_shares_the_queues_and_names_who_holds_one(
        tenant: Connection, weed_remote: S3Remote, tmp_path: Path) -> None:
    recs = recorders(tenant, 2)
    for rec in recs.values():
        rec.add(4)
    alpha = Driver(tenant, tmp_path / "alpha", weed_remote, name="alpha")
    beta = Driver(tenant, tmp_path / "beta", weed_remote, name="beta")
    try:
        first = alpha.fold_declared()  # alone: it takes both and keeps their leases
        assert [first[q].entries for q in ("q00", "q01")] == [4, 4]
        skipped = beta.fold_declared()  # two drivers now; both queues are alpha's
        assert {(r.skipped is not None, r.held_by) for r in skipped.values()} == {
            (True, "alpha")}
        for rec in recs.values():
            rec.add(2)
        again = alpha.fold_declared()  # its fair share is one queue: it gives one back
        assert all(r.entries == 2 for r in again.values())
        taken = beta.fold_declared()
        moved = [q for q, r in taken.items() if r.skipped is None]
        assert len(moved) == 1 and taken[moved[0]].pulled >= 1  # caught up from the bucket
        kept = next(q for q in recs if q not in moved)
        assert taken[kept].held_by == "alpha"
        alpha.close()  # a clean stop gives its leases back at once
        rec = recs[kept]
        rec.add(3)
        last = beta.fold_declared()
        assert last[kept].skipped is None and last[kept].entries == 3
        assert floor_ids(beta.floor, kept) == rec.written_ids()
    finally:
        alpha.close()
        beta.close()
    assert not tenant.redis.exists(tenant.keys("q00").archive_lease,
                                   tenant.keys("q01").archive_lease)


def test_a_driver_without_a_remote_never_takes_another_floors_queue(
        tenant: Connection, tmp_path: Path) -> None:
    rec = recorders(tenant, 1)["q00"]
    rec.add(5)
    # claims floor:<a> as the record (a floor alone claims only when told to)
    with Driver(tenant, tmp_path / "a", name="a", claim_custody=True) as a:
        assert a.fold_declared()["q00"].trimmed == 5
    rec.add(2)
    with Driver(tenant, tmp_path / "b", name="b") as b:
        report = b.fold_declared()["q00"]
        assert report.skipped is not None and "another driver's floor" in report.skipped
        assert b.floor.checkpoint("q00") == "0-0" and b.floor.gaps("q00") == []
    assert rec.stream_ids() == rec.written_ids()[-2:]  # left for a, untouched


def test_a_lease_held_elsewhere_is_skipped_not_waited_for(
        tenant: Connection, tmp_path: Path) -> None:
    rec = recorders(tenant, 1)["q00"]
    rec.add(3)
    other = FoldLease(tenant, "q00", 30_000, token="host-9:42/abc").acquire()
    with Driver(tenant, tmp_path / "a", wait_ms=10_000) as driver:
        started = time.monotonic()
        report = driver.fold_declared()["q00"]
        assert time.monotonic() - started < 5  # no waiting for the lease
    assert (report.skipped is not None, report.held_by, report.entries) == (True, "host-9:42", 0)
    other.release()


def test_emq_archive_fold_skips_a_held_queue_naming_its_holder(
        rec: Recorder, server_url: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from echomq.cli.app import main

    rec.add(2)
    other = FoldLease(rec.conn, rec.queue, 30_000, token="db-7:99/xyz").acquire()
    try:
        result = CliRunner().invoke(main, ["--url", server_url, "archive", "fold", rec.queue,
                                          "--floor", str(tmp_path / "floor"), "--bucket", "",
                                          "--json"], catch_exceptions=False)
    finally:
        other.release()
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # one JSON line per queue
    assert (report["held_by"], report["entries"]) == ("db-7:99", 0) and report["skipped"]
    assert f"skipped {rec.queue}: another driver holds its fold lease (db-7:99)" in \
        result.stderr
    assert rec.stream_ids() == rec.written_ids()


def test_emq_scheduler_refuses_a_fold_lease_that_does_not_outlast_the_interval() -> None:
    from click.testing import CliRunner

    from echomq.cli.app import main

    result = CliRunner().invoke(main, ["scheduler", "--fold", "--fold-interval", "1m",
                                       "--fold-lease", "60s"])
    assert result.exit_code == 2
    assert "must outlast --fold-interval 1m" in result.output
