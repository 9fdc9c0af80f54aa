"""``app.worker(processes=N)`` / ``emq worker --processes N``: a supervisor of spawned
children, on real processes and a real server: a child killed mid-job is replaced and
its job retried at once; a supervisor killed leaves no child behind; a graceful stop
balances the books; children recycle by job count and by memory; bad input is refused."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import echomq
from echomq.errors import InvalidArgument
from echomq.prometheus import render
from tests.prometheus.scrape import parse, value
from tests.support import ROOT
from tests.support.pids import alive, children
from tests.support.waits import wait_until

pytestmark = pytest.mark.plain_only  # processes, not the server, are under test here


class Supervised:
    """``emq worker tests.support.proc_tasks:app`` in a subprocess; its output collected."""

    def __init__(self, url: str, queue: str, *args: str, env: dict[str, str] | None = None,
                 session: bool = False) -> None:
        environ = {**os.environ, "EMQ_TEST_QUEUE": queue, "PYTHONPATH": str(ROOT),
                   **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "echomq", "--url", url, "--log-level", "INFO", "worker",
             "tests.support.proc_tasks:app", "--lease", "60s", *args],
            cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=session)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def ready(self, n: int, timeout: float = 20, without: int = 0) -> set[int]:
        """Wait until ``n`` children (never ``without``) run a consumer; their pids."""
        def started() -> set[int] | None:
            pids = {p for p in children(self.proc.pid)
                    if f"[pid {p}] echomq.consumer: consumer on" in self.output}
            return pids if len(pids) == n and without not in pids else None
        found: set[int] = wait_until(started, timeout=timeout, step=0.05)
        return found

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._close()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close()

    def _close(self) -> None:
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def supervised() -> Iterator[list[Supervised]]:
    """Supervisors started by a test, stopped (then killed) at its end."""
    started: list[Supervised] = []
    yield started
    for s in started:
        try:
            s.stop(timeout=20)
        except subprocess.TimeoutExpired:
            s.kill()


def hold_job(conn: echomq.Connection, queue: str, marker: Path, seconds: float) -> str:
    return echomq.add(conn, queue, {"args": [str(marker), seconds], "kwargs": {}},
                      name="procs.hold")


def runs(marker: Path) -> list[int]:
    """The pids that ran the ``hold`` job(s) writing to ``marker``, one per run."""
    return [int(p) for p in marker.read_text().split()] if marker.exists() else []


def test_a_child_killed_mid_job_is_replaced_and_its_job_runs_again_once(
        server_url, names, tmp_path, supervised) -> None:
    queue = names("procs")
    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "2", "--concurrency", "1", "--record")
    supervised.append(s)
    first = s.ready(2)
    marker = tmp_path / "runs"
    job_id = hold_job(conn, queue, marker, 1.0)
    victim = wait_until(lambda: runs(marker), timeout=10)[0]
    assert victim in first
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    # a replacement child: two consumers again, one of them new, within about a second
    s.ready(2, timeout=10, without=victim)
    print(f"replacement child working {time.monotonic() - killed:.2f}s after the kill")
    assert time.monotonic() - killed < 5.0  # about 1 s here; slack for a loaded machine
    # recovered at once (the lease is 60 s): run again exactly once, then completed
    wait_until(lambda: echomq.get_job(conn, queue, job_id).state == "completed", timeout=15)
    assert time.monotonic() - killed < 15
    job = echomq.get_job(conn, queue, job_id)
    assert job.attempts == 2
    ran = runs(marker)
    assert len(ran) == 2 and ran[0] == victim and ran[1] != victim
    assert job.result == ran[1]
    entries = conn.redis.xrange(conn.keys(queue).completions)
    assert len(entries) == 1 and job_id in str(entries[0][1])  # one entry, of the success
    assert f"worker process {victim} died (signal 9)" in str(job.raw)
    assert "died (signal 9) holding 1 job(s)" in s.output, s.output
    assert s.stop() == 0
    conn.close()


def test_a_job_that_kills_every_child_ends_dead(server_url, names, supervised) -> None:
    queue = names("procs")
    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "2", "--concurrency", "1")
    supervised.append(s)
    s.ready(2)
    job_id = echomq.add(conn, queue, {"args": [], "kwargs": {}}, name="procs.die",
                        max_attempts=2)
    wait_until(lambda: echomq.get_job(conn, queue, job_id).state == "dead", timeout=15)
    job = echomq.get_job(conn, queue, job_id)
    assert job.attempts == 2 and "died (signal 9)" in (job.last_error or "")
    s.ready(2)  # both replaced
    assert s.output.count("died (signal 9) holding 1 job(s)") == 2
    assert s.stop() == 0
    assert "supervisor stopped: 2 restart(s), 0 recycle(s), 2 child death(s)" in s.output
    scraped = parse(render(conn)[0])
    assert {event: value(scraped, "echomq_worker_events_total", queue=queue, event=event)
            for event in ("died", "restarted", "recycled")} == {
                "died": 2, "restarted": 2, "recycled": 0}
    conn.close()


def test_the_books_balance_with_three_children_killed_at_random(
        server_url, names, tmp_path, supervised) -> None:
    """A small soak: jobs keep coming while a random child is killed every 0.6 s; every
    job is completed with one stream entry, and every run beyond a job's last was cut
    short by a kill (nothing lost, nothing repeated by a healthy child)."""
    queue = names("procs")
    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "3", "--concurrency", "2", "--record")
    supervised.append(s)
    s.ready(3)
    marker = tmp_path / "runs"
    rng = random.Random(23)
    ids: list[str] = []
    killed: set[int] = set()
    for round_ in range(10):
        ids += echomq.add_many(conn, queue, [{"args": [str(marker), rng.randint(5, 40)],
                                              "kwargs": {}} for _ in range(40)],
                               name="procs.work", max_attempts=20)
        time.sleep(0.3)
        if round_ % 2 == 1:
            live = sorted(children(s.proc.pid))
            if live:
                victim = rng.choice(live)
                os.kill(victim, signal.SIGKILL)
                killed.add(victim)
        time.sleep(0.3)
    wait_until(lambda: echomq.counts(conn, queue).completed == len(ids), timeout=30, step=0.1)
    counts = echomq.counts(conn, queue)
    assert (counts.active, counts.dead, counts.pending, counts.scheduled) == (0, 0, 0, 0)
    entries = conn.redis.xrange(conn.keys(queue).completions)
    assert len(entries) == len(ids)  # one entry per job
    by_job: dict[str, list[int]] = {}
    for line in marker.read_text().splitlines():
        job_id, pid = line.split()
        by_job.setdefault(job_id, []).append(int(pid))
    assert set(by_job) == set(ids)
    for job_id, pids in by_job.items():
        assert set(pids[:-1]) <= killed, (job_id, pids, killed)  # only a kill cut a run short
    assert s.stop() == 0
    assert len(killed) == 5
    assert "supervisor stopped: 5 restart(s), 0 recycle(s), 5 child death(s)" in s.output
    conn.close()


def test_the_books_balance_with_kills_and_timeouts(server_url, names, tmp_path,
                                                  supervised) -> None:
    """The soak with timeouts too (issue 23): three one-slot children, a random one killed
    every round, and one job in eight stuck in C past its timeout plus grace (its child
    ends itself). Every job ends once, with one stream entry: the stuck ones dead as
    killed at their timeout, the others completed."""
    queue = names("soak")
    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "3", "--concurrency", "1", "--record")
    supervised.append(s)
    s.ready(3)
    marker = tmp_path / "runs"
    rng = random.Random(2323)
    work_ids: list[str] = []
    stuck_ids: list[str] = []
    for _ in range(6):
        work_ids += echomq.add_many(conn, queue, [{"args": [str(marker), rng.randint(5, 30)],
                                                   "kwargs": {}} for _ in range(21)],
                                    name="procs.work", max_attempts=20)
        stuck_ids += echomq.add_many(conn, queue, [{"args": [3600], "kwargs": {}}] * 3,
                                     name="procs.stuck", max_attempts=1)
        time.sleep(0.4)
        live = sorted(children(s.proc.pid))
        if live:
            os.kill(rng.choice(live), signal.SIGKILL)
        time.sleep(0.4)
    total = len(work_ids) + len(stuck_ids)
    try:
        wait_until(lambda: echomq.counts(conn, queue).completed
                   + echomq.counts(conn, queue).dead == total, timeout=90, step=0.2)
    except AssertionError:
        raise AssertionError(f"{echomq.counts(conn, queue)}\n{s.output[-3000:]}") from None
    counts = echomq.counts(conn, queue)
    assert (counts.completed, counts.dead, counts.active, counts.pending) == (
        len(work_ids), len(stuck_ids), 0, 0)
    for job_id in stuck_ids:
        error = echomq.get_job(conn, queue, job_id).last_error
        assert error == "timeout after 0.5 s (killed)" or (
            error.startswith("worker process ") and error.endswith(" died (signal 9)")), error
    recorded = [f["job"] for _, f in conn.redis.xrange(conn.keys(queue).completions)]
    assert sorted(recorded) == sorted(work_ids + stuck_ids)  # one entry each
    assert s.stop() == 0
    conn.close()


def test_children_do_not_outlive_a_supervisor_killed_with_sigkill(
        server_url, names, tmp_path, supervised) -> None:
    queue = names("procs")
    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "2", "--concurrency", "1")
    supervised.append(s)
    pids = s.ready(2)
    marker = tmp_path / "runs"
    job_id = hold_job(conn, queue, marker, 30.0)
    wait_until(lambda: runs(marker), timeout=10)
    s.proc.kill()
    killed = time.monotonic()
    wait_until(lambda: not any(alive(p) for p in pids), timeout=10, step=0.02)
    print(f"children gone {time.monotonic() - killed:.2f}s after the supervisor")
    assert time.monotonic() - killed < 3.0
    # the orphan handed its running job back rather than leave it to its lease
    job = echomq.get_job(conn, queue, job_id)
    assert job.state == "pending", job
    conn.close()


def test_a_graceful_stop_of_three_children_finishes_or_hands_back_every_job(
        server_url, names, tmp_path, supervised) -> None:
    queue = names("procs")
    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "3", "--concurrency", "2")
    supervised.append(s)
    s.ready(3)
    marker = tmp_path / "runs"
    ids = [hold_job(conn, queue, marker, 0.3) for _ in range(60)]
    wait_until(lambda: len(runs(marker)) >= 6, timeout=15)
    assert s.stop() == 0
    counts = echomq.counts(conn, queue)
    assert counts.active == 0
    assert counts.completed + counts.pending == len(ids)
    assert counts.pending > 0 and counts.completed > 0
    assert len(runs(marker)) == counts.completed  # each finished job ran once
    assert "supervisor stopped: 0 restart(s), 0 recycle(s), 0 child death(s)" in s.output
    conn.close()


def test_a_second_sigterm_forces_the_stop_and_running_jobs_are_handed_back(
        server_url, names, tmp_path, supervised) -> None:
    queue = names("procs")
    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "2", "--concurrency", "1")
    supervised.append(s)
    s.ready(2)
    marker = tmp_path / "runs"
    ids = [hold_job(conn, queue, marker, 30.0) for _ in range(2)]
    wait_until(lambda: len(runs(marker)) == 2, timeout=10)
    s.proc.send_signal(signal.SIGTERM)  # graceful: the 30 s jobs would keep them
    time.sleep(0.5)
    assert s.proc.poll() is None
    s.proc.send_signal(signal.SIGINT)  # forced
    stopped = time.monotonic()
    assert s.proc.wait(15) == 0
    assert time.monotonic() - stopped < 10
    assert {echomq.get_job(conn, queue, i).state for i in ids} == {"pending"}
    assert echomq.counts(conn, queue).active == 0
    s.stop()
    conn.close()


def test_ctrl_c_to_the_whole_process_group_is_one_graceful_stop(
        server_url, names, tmp_path, supervised) -> None:
    queue = names("procs")
    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "2", "--concurrency", "1", session=True)
    supervised.append(s)
    s.ready(2)
    marker = tmp_path / "runs"
    job_id = hold_job(conn, queue, marker, 1.5)
    wait_until(lambda: runs(marker), timeout=10)
    os.killpg(s.proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches every process
    assert s.proc.wait(20) == 0
    job = echomq.get_job(conn, queue, job_id)
    assert job.state == "completed" and len(runs(marker)) == 1  # finished, not forced
    s.stop()
    assert "supervisor stopped: 0 restart(s), 0 recycle(s), 0 child death(s)" in s.output
    conn.close()


def test_a_child_recycles_after_max_jobs_per_process(
        server_url, names, tmp_path, supervised) -> None:
    queue = names("procs")
    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "1", "--concurrency", "1",
                   "--max-jobs-per-process", "3")
    supervised.append(s)
    s.ready(1)
    marker = tmp_path / "runs"
    ids = [hold_job(conn, queue, marker, 0.0) for _ in range(7)]
    wait_until(lambda: all(echomq.get_job(conn, queue, i).state == "completed" for i in ids),
               timeout=30, step=0.05)
    ran = runs(marker)
    assert len(ran) == 7  # nothing lost, nothing repeated
    assert len(set(ran)) >= 2
    assert "recycling: 3 jobs settled (max_jobs_per_process 3)" in s.output
    assert s.stop() == 0
    assert " recycle(s), 0 child death(s)" in s.output
    recycled = value(parse(render(conn)[0]), "echomq_worker_events_total", queue=queue,
                     event="recycled")
    assert recycled is not None and recycled >= 2
    conn.close()


def test_a_child_recycles_past_max_memory_mb(server_url, names, supervised) -> None:
    queue = names("procs")
    conn = echomq.connect(server_url)
    s = Supervised(server_url, queue, "--processes", "1", "--concurrency", "1",
                   "--max-memory-mb", "300")
    supervised.append(s)
    (first,) = s.ready(1)
    hog = echomq.add(conn, queue, {"args": [400], "kwargs": {}}, name="procs.hog")
    wait_until(lambda: echomq.get_job(conn, queue, hog).state == "completed", timeout=15)
    assert echomq.get_job(conn, queue, hog).result == first
    wait_until(lambda: "recycled (RSS" in s.output, timeout=15)
    after = echomq.add(conn, queue, {"args": [], "kwargs": {}}, name="procs.pid")
    wait_until(lambda: echomq.get_job(conn, queue, after).state == "completed", timeout=15)
    assert echomq.get_job(conn, queue, after).result != str(first)
    assert "over max_memory_mb 300" in s.output
    assert s.stop() == 0
    conn.close()


def test_a_module_children_cannot_import_exits_non_zero_naming_it(server_url, names) -> None:
    env = {**os.environ, "EMQ_TEST_QUEUE": names("procs"), "PYTHONPATH": str(ROOT),
           "EMQ_TEST_FAIL_IN_CHILD": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "echomq", "--url", server_url, "worker",
         "tests.support.proc_tasks:app", "--processes", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: worker children for tests.support.proc_tasks:app failed "
                           "to start 3 times in a row: ImportError: tests.support.proc_tasks "
                           "refuses to load in a child process"), proc.stderr


def test_children_killed_while_they_start_are_deaths_not_a_module_that_cannot_start(
        server_url, names, supervised) -> None:
    """A kill -9 (or the OOM killer) that lands while a child still starts, four times
    in a row, is four deaths: the supervisor replaces them and goes on, where a module
    that fails to import ends it after three (the test above)."""
    s = Supervised(server_url, names("procs"), "--processes", "2",
                   env={"EMQ_TEST_SLOW_CHILD": "1.5"})
    supervised.append(s)
    for _ in range(2):  # four kills before any child is ready
        def two() -> set[int] | None:
            found = children(s.proc.pid)
            return found if len(found) == 2 else None
        starting = wait_until(two, timeout=20, step=0.02)
        for pid in starting:
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda gone=starting: not children(s.proc.pid) & gone, timeout=10,
                   step=0.02)
    s.ready(2, timeout=30)
    assert s.proc.poll() is None, s.output
    assert "failed to start" not in s.output, s.output
    assert s.stop() == 0
    assert "supervisor stopped: 4 restart(s), 0 recycle(s), 4 child death(s)" in s.output


def test_app_worker_with_processes_runs_children_from_python(server_url, names) -> None:
    from echomq.app.supervisor import Supervisor
    from tests.support.proc_tasks import app

    queue = names("procs")
    conn = echomq.connect(server_url)
    app.adopt(echomq.connect(server_url))
    supervisor = app.worker([queue], processes=2, concurrency=2, poll_ms=50)
    assert isinstance(supervisor, Supervisor)
    assert supervisor.target == "tests.support.proc_tasks:app"  # found where it was made
    runner = threading.Thread(target=supervisor.run)
    runner.start()
    try:
        ids = echomq.add_many(conn, queue, [{"args": [], "kwargs": {}}] * 20, name="procs.pid")
        wait_until(lambda: echomq.counts(conn, queue).completed == 20, timeout=20)
        pids = {echomq.get_job(conn, queue, i).result for i in ids}
        assert pids <= set(supervisor.pids) and len(supervisor.pids) == 2
    finally:
        supervisor.stop()
        runner.join(30)
    assert not runner.is_alive()
    assert (supervisor.restarts, supervisor.recycles, supervisor.child_deaths) == (0, 0, 0)
    conn.close()


@pytest.mark.parametrize("option", [{"processes": 0}, {"processes": 2,
                                                        "max_jobs_per_process": 0},
                                    {"processes": 2, "max_memory_mb": 0}, {"processes": -1},
                                    {"max_memory_mb": 0}])
def test_bad_process_options_are_refused(option, server_url) -> None:
    from tests.support.proc_tasks import app

    app.adopt(echomq.connect(server_url))
    with pytest.raises(InvalidArgument, match=f"{next(reversed(option))} must be a positive"):
        app.worker(**option)


def test_an_app_in_a_scripts_main_cannot_have_processes(server_url) -> None:
    script = ("import echomq\n"
              f"app = echomq.App({server_url!r})\n"
              "@app.task(queue='q')\n"
              "def f(): pass\n"
              "app.worker(processes=2)\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1
    assert "was defined in __main__ (a script)" in proc.stderr
    assert "emq worker myapp.tasks:app --processes N" in proc.stderr


def test_processes_need_an_app_not_a_function(server_url) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "echomq", "--url", server_url, "worker",
         "tests.support.workers:slow", "-q", "x", "--processes", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--processes and the recycling bounds need an App" in proc.stderr


def test_a_child_stuck_past_its_timeout_is_killed_and_replaced(server_url, names,
                                                               supervised) -> None:
    """Issue 23: a task stuck in time.sleep in a one-slot child ends at its timeout plus
    grace: the child settles it as killed and exits, and a new child takes the next job."""
    conn = echomq.connect(server_url)
    queue = names("stuck")
    stuck = echomq.add(conn, queue, {"args": [3600], "kwargs": {}}, name="procs.stuck",
                       max_attempts=1)
    run = Supervised(server_url, queue, "--processes", "2", "--concurrency", "1")
    supervised.append(run)
    row = wait_until(lambda: (j := echomq.get_job(conn, queue, stuck)).state == "dead" and j,
                     timeout=30)
    assert row.last_error == "timeout after 0.5 s (killed)"
    quick = echomq.add(conn, queue, {"args": [], "kwargs": {}}, name="procs.pid")
    wait_until(lambda: echomq.get_job(conn, queue, quick).state == "completed", timeout=30)
    conn.close()
