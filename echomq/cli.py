"""``emq``: the command line. Every command takes ``--url`` (or ``$EMQ_URL``); with
none, it runs against the embedded Valkey of ``--data-dir``: ONE persistent server
per folder, started by the first command that needs it and left running for the
next, until ``emq server stop``."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

import echomq
from echomq.jobs.consumer import Consumer
from echomq.jobs.scheduler import BatchScheduler
from echomq.queue.connection import Connection
from echomq.queue.embedded import ServerInfo, SharedValkey

log = logging.getLogger("echomq.cli")


def _connect(ctx: click.Context) -> Connection:
    opts = ctx.find_root().params
    if "conn" not in ctx.meta:
        with _as_click_error():  # a ConnectionFailed's text is already redacted
            ctx.meta["conn"] = echomq.connect(
                opts["url"], executor=opts["executor"], data_dir=opts["data_dir"]
            )
    conn: Connection = ctx.meta["conn"]
    return conn


def _emit(data: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(data, default=str))
    elif isinstance(data, dict):
        for key, value in data.items():
            click.echo(f"{key}: {value}")
    else:
        click.echo(data)


def load_handler(path: str) -> Callable[..., Any]:
    """Import ``module:function``; a clear error when it does not import."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(
            f"{path!r} is not of the form module:function", param_hint="HANDLER"
        )
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise click.BadParameter(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}",
            param_hint="HANDLER",
        ) from exc
    handler = getattr(module, attr, None)
    if not callable(handler):
        raise click.BadParameter(
            f"module {module_name!r} has no callable {attr!r}", param_hint="HANDLER"
        )
    return handler  # type: ignore[no-any-return]


@click.group()
@click.option("--url", envvar="EMQ_URL", default=None,
              help="redis://, rediss:// or unix:// URL; default: the embedded Valkey of "
              "--data-dir.")
@click.option("--executor", type=click.Choice(["scripts", "functions"]), default="scripts",
              envvar="EMQ_EXECUTOR", show_default=True)
@click.option("--data-dir", envvar="EMQ_DATA_DIR", default=None,
              help="Folder of the embedded Valkey used without --url: one shared, "
              "persistent server per folder (default ./.echomq/valkey).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
def main(url: str | None, executor: str, data_dir: str | None, log_level: str) -> None:
    """EchoMQ: a reliable job queue on Redis/Valkey with a durable archive."""
    logging.basicConfig(level=log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("botocore", "boto3", "urllib3", "apscheduler"):  # their INFO is noise here
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLevelName(log_level)))
    _share_with_subcommands(url, data_dir)


def _share_with_subcommands(url: str | None, data_dir: str | None) -> None:
    """Hand ``--url``/``--data-dir`` on through the environment, which every subcommand
    and ``connect()`` read: ``emq archive`` parses its own ``--url`` (default
    ``$EMQ_URL``) and connects without a folder, so ``emq --data-dir D archive ...``
    would otherwise reach another folder's server."""
    if url:
        os.environ["EMQ_URL"] = url
    if data_dir:
        os.environ["EMQ_DATA_DIR"] = str(Path(data_dir).resolve())


@main.command()
@click.argument("handler")
@click.option("--queue", "-q", required=True)
@click.option("--concurrency", "-c", default=8, show_default=True)
@click.option("--lease-ms", default=30_000, show_default=True)
@click.option("--prefetch", type=int, default=None, help="Claimed jobs buffered beyond "
              "the running ones (default: adaptive, by observed handler time).")
@click.option("--batch-size", default=100, show_default=True)
@click.option("--cancel/--no-cancel", default=True, show_default=True)
@click.option("--record/--no-record", default=False, show_default=True)
@click.option("--recovery", type=click.Choice(["reap", "stalled"]), default="reap",
              show_default=True)
@click.option("--max-stalled", default=1, show_default=True)
@click.option("--auto-extend/--no-auto-extend", default=False, show_default=True)
@click.option("--grace-ms", default=30_000, show_default=True)
@click.pass_context
def worker(ctx: click.Context, handler: str, queue: str, concurrency: int, lease_ms: int,
           prefetch: int | None, batch_size: int, cancel: bool, record: bool, recovery: str,
           max_stalled: int, auto_extend: bool, grace_ms: int) -> None:
    """Process QUEUE with HANDLER (module:function) until SIGTERM/SIGINT."""
    func = load_handler(handler)
    consumer = Consumer(
        _connect(ctx), queue, func, concurrency=concurrency, lease_ms=lease_ms,
        prefetch=prefetch, batch_size=batch_size, cancel=cancel, record=record,
        recovery=recovery,  # type: ignore[arg-type]
        max_stalled=max_stalled, auto_extend=auto_extend, shutdown_grace_ms=grace_ms,
    )
    consumer.run()


@main.command()
@click.option("--queue", "-q", "queues", multiple=True, help="Sweep these queues.")
@click.option("--interval-ms", default=30_000, show_default=True)
@click.option("--max-stalled", default=1, show_default=True)
@click.option("--fold/--no-fold", default=False, help="Also fold every declared stream.")
@click.option("--fold-interval-ms", default=60_000, show_default=True)
@click.option("--floor", default=".echomq/floor", show_default=True,
              help="The LMDB floor; the remote comes from EMQ_S3_BUCKET, EMQ_S3_PREFIX, "
              "EMQ_S3_ENDPOINT_URL, EMQ_S3_REGION (none: floor only).")
@click.pass_context
def scheduler(ctx: click.Context, queues: tuple[str, ...], interval_ms: int, max_stalled: int,
              fold: bool, fold_interval_ms: int, floor: str) -> None:
    """Run the stalled sweep (and the archive fold) on APScheduler until interrupted."""
    import signal
    import threading

    conn = _connect(ctx)
    batch = BatchScheduler(conn)
    if queues:
        batch.add_sweep(queues, interval_ms=interval_ms, max_stalled=max_stalled)
    if fold:
        from echomq.archive import Driver, S3Remote

        bucket = os.environ.get("EMQ_S3_BUCKET")
        remote = S3Remote(
            bucket, os.environ.get("EMQ_S3_PREFIX", ""),
            endpoint_url=os.environ.get("EMQ_S3_ENDPOINT_URL"),
            region=os.environ.get("EMQ_S3_REGION"),
        ) if bucket else None
        # One driver for the scheduler's life: its passes share one fold lease token, so a
        # pass cut short by a server failure does not lock the next ones out.
        driver = Driver(conn, floor, remote)
        batch.add_fold(driver.fold_declared, interval_ms=fold_interval_ms)
    if not queues and not fold:
        raise click.UsageError("nothing to schedule: give --queue and/or --fold")
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    with batch:
        done.wait()
    if fold:
        driver.close()


@main.command()
@click.option("--queue", "-q", required=True)
@click.argument("payloads", nargs=-1)
@click.option("--job-id", default=None)
@click.option("--delay-ms", default=0)
@click.option("--priority", default=0)
@click.option("--max-attempts", default=3)
@click.pass_context
def enqueue(ctx: click.Context, queue: str, payloads: tuple[str, ...], job_id: str | None,
            delay_ms: int, priority: int, max_attempts: int) -> None:
    """Add jobs; each PAYLOAD is JSON text."""
    try:
        bodies = [json.loads(p) for p in payloads] or [None]
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"payload is not JSON: {exc}") from exc
    conn = _connect(ctx)
    for body in bodies:
        click.echo(echomq.add(conn, queue, body, job_id=job_id, delay_ms=delay_ms,
                              priority=priority, max_attempts=max_attempts))


@main.command()
@click.option("--queue", "-q", required=True)
@click.argument("job_id")
@click.option("--reason", default=None)
@click.pass_context
def cancel(ctx: click.Context, queue: str, job_id: str, reason: str | None) -> None:
    """Cancel JOB_ID: removed if unclaimed, signalled if running."""
    try:
        click.echo(echomq.cancel.request(_connect(ctx), queue, job_id, reason))
    except echomq.EchoMQError as exc:
        raise click.ClickException(str(exc)) from exc


@main.command()
@click.option("--queue", "-q", required=True)
@click.option("--max-stalled", default=1, show_default=True)
@click.option("--limit", default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def sweep(ctx: click.Context, queue: str, max_stalled: int, limit: int, as_json: bool) -> None:
    """One stalled sweep, now (on functions, a pass meeting a lapsed grouped job runs
    the scripted sweep, as the Consumer and the scheduler do)."""
    from echomq.jobs.stalled import sweep_stalled

    try:
        result = sweep_stalled(_connect(ctx), queue, max_stalled, limit)
    except echomq.EchoMQError as exc:
        raise click.ClickException(str(exc)) from exc
    _emit({"recovered": result.recovered, "dead": result.dead}, as_json)


@main.command()
@click.option("--queue", "-q", required=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def reap(ctx: click.Context, queue: str, as_json: bool) -> None:
    """Return every lapsed lease to pending, now."""
    _emit({"reaped": echomq.reap(_connect(ctx), queue)}, as_json)


@main.command()
@click.option("--queue", "-q", required=True)
@click.option("--limit", default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dead(ctx: click.Context, queue: str, limit: int, as_json: bool) -> None:
    """List dead-lettered jobs with their last error."""
    conn = _connect(ctx)
    rows = []
    for job_id in echomq.dead_jobs(conn, queue, limit):
        job = echomq.get_job(conn, queue, job_id)
        rows.append({"id": job_id, "attempts": job.attempts if job else None,
                     "last_error": job.last_error if job else None})
    if as_json:
        _emit(rows, True)
    for row in [] if as_json else rows:
        click.echo(f"{row['id']}\tattempts={row['attempts']}\t{row['last_error']}")


@main.command()
@click.option("--queue", "-q", required=True)
@click.option("--state", type=click.Choice(["dead", "completed"]), default="dead",
              show_default=True)
@click.option("--keep", default=0, show_default=True, help="The newest rows to keep.")
@click.pass_context
def purge(ctx: click.Context, queue: str, state: str, keep: int) -> None:
    """Forget finished jobs in Redis (the archive keeps a declared stream's history)."""
    click.echo(f"purged {echomq.purge(_connect(ctx), queue, state, keep)} {state} job(s)")


@main.command()
@click.option("--queue", "-q", required=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, queue: str, as_json: bool) -> None:
    """Jobs per state and the queue's counters."""
    conn = _connect(ctx)
    _emit({**echomq.counts(conn, queue).as_dict(), **echomq.metrics(conn, queue)}, as_json)


@main.command()
@click.option("--workdir", default=".echomq/demo", show_default=True)
def demo(workdir: str) -> None:
    """The whole pipeline end to end on a private Valkey, stopped at the end (see README)."""
    from echomq.demo import run_demo

    run_demo(workdir)


@main.group()
def server() -> None:
    """The embedded Valkey of --data-dir: one persistent server per folder, shared by
    every command without --url and by echomq.connect() without a URL."""


def _describe(info: ServerInfo) -> dict[str, Any]:
    return {"url": info.url, "pid": info.pid, "data_dir": info.data_dir}


def _shared(ctx: click.Context) -> SharedValkey:
    return SharedValkey(ctx.find_root().params["data_dir"])


@contextlib.contextmanager
def _as_click_error() -> Iterator[None]:
    """An EchoMQError becomes a one-line ``Error: ...`` and exit status 1, not a traceback."""
    try:
        yield
    except echomq.EchoMQError as exc:
        raise click.ClickException(str(exc)) from exc


@server.command("start")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def server_start(ctx: click.Context, as_json: bool) -> None:
    """Start the folder's server (or find the running one) and print where it listens."""
    with _as_click_error():
        info = _shared(ctx).ensure()
    _emit({"state": "running", **_describe(info)}, as_json)


@server.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def server_status(ctx: click.Context, as_json: bool) -> None:
    """Print the folder's server; exit status 3 when none runs (as LSB's status)."""
    shared = _shared(ctx)
    with _as_click_error():
        info = shared.find()
    if info is None:
        _emit({"state": "stopped", "data_dir": str(shared.data_dir)}, as_json)
        ctx.exit(3)
    _emit({"state": "running", **_describe(info)}, as_json)


@server.command("stop")
@click.pass_context
def server_stop(ctx: click.Context) -> None:
    """Stop the folder's server; its AOF keeps every job for the next start."""
    shared = _shared(ctx)
    with _as_click_error():
        info = shared.stop()
    if info is None:
        click.echo(f"no server running for {shared.data_dir}")
    else:
        click.echo(f"stopped the server of {info.data_dir} (pid {info.pid})")


def _add_archive() -> None:
    from echomq.archive.cli import archive_cli

    main.add_command(archive_cli, name="archive")


_add_archive()
