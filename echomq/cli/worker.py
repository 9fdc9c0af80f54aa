"""``emq worker`` and ``emq scheduler``: the long-running processes."""

from __future__ import annotations

import importlib
import logging
import signal
import sys
import threading
from functools import partial
from typing import Any

import click

from echomq.app.app import App
from echomq.cli.app import as_click_error, connect
from echomq.cli.app import options as cli_options
from echomq.cli.durations import DURATION, POSITIVE_DURATION, format_duration_ms
from echomq.cli.remote import RemoteSettings, remote_options
from echomq.worker import Consumer

log = logging.getLogger("echomq.scheduler")


def start_line(url: str, prefix: str, *, cron: int | None,
               sweep: tuple[int, tuple[str, ...]] | None, retention: int | None,
               fold: tuple[int, int, str, str | None] | None) -> str:
    """What ``emq scheduler`` runs, how often and on which queues: its first log line
    (the passes that find nothing to do log nothing)."""
    every = format_duration_ms
    parts = []
    if cron is not None:
        parts.append(f"cron fires every {every(cron)} (every queue of prefix {prefix!r})")
    if sweep is not None:
        parts.append(f"stalled sweep every {every(sweep[0])} of {', '.join(sweep[1])}")
    if retention is not None:
        parts.append(f"retention every {every(retention)} (every queue with a policy)")
    if fold is not None:
        fold_ms, prune_ms, floor, bucket = fold
        parts.append(f"archive fold every {every(fold_ms)} and prune every {every(prune_ms)}"
                     f" (every declared queue; floor {floor}, "
                     + (f"bucket {bucket})" if bucket else "no bucket)"))
    return f"scheduler on {url}: " + "; ".join(parts)


def load_handler(path: str) -> Any:
    """Import ``module:attribute`` (an App or a function); a clear error when it does not
    import or is neither."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(
            f"{path!r} is not of the form module:app or module:function", param_hint="HANDLER"
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
    if not isinstance(handler, App) and not callable(handler):
        raise click.BadParameter(
            f"module {module_name!r} has no App or callable {attr!r}", param_hint="HANDLER"
        )
    return handler


@click.command()
@click.argument("handler")
@click.option("--queue", "-q", "queue_spec", default=None,
              help="The queues, in strict priority order (high,mail,default) or weighted "
              "(high:5,low:1). With an App, default: every task's queue; with a function, "
              "required.")
@click.option("--concurrency", "-c", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--lease", "lease_ms", type=POSITIVE_DURATION, default="30s", show_default=True,
              help="How long a claimed job is held before another worker may take it.")
@click.option("--prefetch", type=click.IntRange(min=0), default=None, help="Claimed jobs "
              "buffered beyond the running ones (default: adaptive, by observed handler "
              "time).")
@click.option("--batch-size", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--cancel/--no-cancel", default=True, show_default=True)
@click.option("--record/--no-record", default=False, show_default=True)
@click.option("--recovery", type=click.Choice(["reap", "stalled"]), default="reap",
              show_default=True)
@click.option("--max-stalled", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--auto-extend/--no-auto-extend", default=False, show_default=True)
@click.option("--grace", "grace_ms", type=DURATION, default="30s", show_default=True,
              help="On SIGTERM, how long running jobs may finish before they are let go.")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes (an App only): a supervisor spawns this many children, "
              "each with --concurrency handler threads, replaces one that dies and settles "
              "the jobs it held at once.")
@click.option("--max-jobs-per-process", type=click.IntRange(min=1), default=None,
              help="Restart a child gracefully after it settled this many jobs.")
@click.option("--max-memory-mb", type=click.IntRange(min=1), default=None,
              help="Restart a child gracefully once its RSS passes this many MiB.")
@click.pass_context
def worker(ctx: click.Context, handler: str, queue_spec: str | None, concurrency: int,
           lease_ms: int, prefetch: int | None, batch_size: int, cancel: bool, record: bool,
           recovery: str, max_stalled: int, auto_extend: bool, grace_ms: int, processes: int,
           max_jobs_per_process: int | None, max_memory_mb: int | None) -> None:
    """Run HANDLER until SIGTERM/SIGINT: an App's tasks (module:app), routed by each
    job's name, or one function (module:function) for every job of the queues.

    With --processes N (or a recycling bound) the command supervises N child processes,
    each importing HANDLER; a second SIGTERM/SIGINT forces the stop."""
    target = load_handler(handler)
    options: dict[str, Any] = dict(
        concurrency=concurrency, lease_ms=lease_ms, prefetch=prefetch, batch_size=batch_size,
        cancel=cancel, record=record, recovery=recovery, max_stalled=max_stalled,
        auto_extend=auto_extend, shutdown_grace_ms=grace_ms)
    supervised = processes > 1 or max_jobs_per_process or max_memory_mb
    if isinstance(target, App):
        if supervised:
            target.import_path = handler
            options.update(processes=processes, max_jobs_per_process=max_jobs_per_process,
                           max_memory_mb=max_memory_mb)
        running = app_worker(ctx, target, queue_spec, options)
        if not supervised:
            running.run()
            return
        with as_click_error():  # children that cannot start: one line, exit status 1
            running.run()
        return
    if supervised:
        raise click.UsageError("--processes and the recycling bounds need an App "
                               "(module:app), not a function")
    if queue_spec is None:
        raise click.UsageError("--queue/-q is required with a function (module:function)")
    Consumer(connect(ctx), queue_spec, target, **options).run()


def app_worker(ctx: click.Context, app: App, queue_spec: str | None,
               options: dict[str, Any]) -> Any:
    """The App's worker, on the server the command line names (``--url``), else on the
    App's own (its url or conn), else on the command line's default (the data folder's
    shared server), whose prefix must then be the App's."""
    opts = cli_options(ctx)
    if opts.url is not None or not app.names_a_server:
        if app.prefix != opts.prefix:
            raise click.UsageError(f"the App's prefix {app.prefix!r} is not the command "
                                   f"line's {opts.prefix!r}: give --prefix {app.prefix}")
        app.adopt(connect(ctx))
    with as_click_error():
        return app.worker(queue_spec, **options)


@click.command()
@click.option("--queue", "-q", "queues", multiple=True, help="Sweep these queues.")
@click.option("--sweep-interval", "interval_ms", type=POSITIVE_DURATION, default="30s",
              show_default=True, help="How often to sweep the --queue queues.")
@click.option("--max-stalled", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--cron/--no-cron", default=True, show_default=True,
              help="Fire the cron schedules of every queue of the prefix (each fire once, "
              "however many schedulers run).")
@click.option("--cron-interval", "cron_interval_ms", type=POSITIVE_DURATION, default="1s",
              show_default=True, help="How often to look for due cron fires.")
@click.option("--fold/--no-fold", default=False, help="Also fold every declared stream.")
@click.option("--fold-interval", "fold_interval_ms", type=POSITIVE_DURATION, default="1m",
              show_default=True)
@click.option("--fold-lease", "fold_lease_ms", type=POSITIVE_DURATION, default=None,
              help="The fold lease, kept between passes by a driver sharing the declared "
              "queues with others; a dead driver's queues move on within it. Default: "
              "twice --fold-interval, at least 30s; refused below the interval.")
@click.option("--driver-name", default=None,
              help="How other drivers name this one when it holds a queue (default "
              "host:pid).")
@click.option("--floor", default=".echomq/floor", show_default=True,
              help="The LMDB floor; the remote comes from --bucket and the other S3 "
              "options (EMQ_S3_*; no bucket: floor only).")
@click.option("--claim-custody", is_flag=True,
              help="With --fold: claim custody of a declared queue that has no custodian "
              "for this floor even without a bucket, so its stream is trimmed (a floor "
              "alone never claims it unasked; `emq archive declare Q --custodian floor` "
              "names it once instead).")
@click.option("--retention/--no-retention", default=True, show_default=True,
              help="Apply every queue's retention policy (emq retention).")
@click.option("--retention-interval", "retention_interval_ms", type=POSITIVE_DURATION,
              default="1m", show_default=True)
@click.option("--prune-interval", "prune_interval_ms", type=POSITIVE_DURATION, default="1h",
              show_default=True,
              help="With --fold: how often each declared queue's archive retention (emq "
              "archive prune --keep ... --save) is applied to the floor and the bucket.")
@remote_options
@click.pass_context
def scheduler(ctx: click.Context, queues: tuple[str, ...], interval_ms: int, max_stalled: int,
              cron: bool, cron_interval_ms: int, fold: bool, fold_interval_ms: int,
              fold_lease_ms: int | None, driver_name: str | None, floor: str,
              claim_custody: bool, retention: bool, retention_interval_ms: int,
              prune_interval_ms: int, s3: RemoteSettings) -> None:
    """Run the cron schedules, the stalled sweep, the archive fold and retention on
    APScheduler until interrupted. Refuses to start with nothing to schedule (--no-cron,
    --no-retention, no --queue, no --fold), and a fold lease no longer than the fold
    interval. Several schedulers with --fold share the declared queues."""
    from echomq.scheduling.scheduler import BatchScheduler

    if not queues and not fold and not retention and not cron:
        raise click.UsageError(
            "nothing to schedule: give --cron, --queue, --fold and/or --retention")
    lease_ms = fold_lease_ms or max(30_000, 2 * fold_interval_ms)
    if fold and lease_ms <= fold_interval_ms:
        raise click.UsageError(
            f"--fold-lease {format_duration_ms(lease_ms)} must outlast --fold-interval "
            f"{format_duration_ms(fold_interval_ms)}: a driver keeps its queues between "
            "passes")
    conn = connect(ctx)
    batch = BatchScheduler(conn)
    if cron:
        batch.add_cron(interval_ms=cron_interval_ms)
    if queues:
        batch.add_sweep(queues, interval_ms=interval_ms, max_stalled=max_stalled)
    if retention:
        batch.add_retention(interval_ms=retention_interval_ms)
    driver = None
    if fold:
        from echomq.archive import Driver

        # One driver for the scheduler's life: its passes share one fold lease token, so a
        # pass cut short by a server failure does not lock the next ones out.
        from echomq.archive.prune import prune_declared

        driver = Driver(conn, floor, s3.build(), lease_ms=lease_ms, name=driver_name,
                        claim_custody=True if claim_custody else None)
        batch.add_fold(driver.fold_declared, interval_ms=fold_interval_ms)
        batch.add_fold(partial(prune_declared, conn, driver.floor, driver.remote),
                       interval_ms=prune_interval_ms, name="prune")
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    log.info("%s", start_line(
        conn.safe_url, conn.prefix,
        cron=cron_interval_ms if cron else None,
        sweep=(interval_ms, queues) if queues else None,
        retention=retention_interval_ms if retention else None,
        fold=(fold_interval_ms, prune_interval_ms, floor, s3.bucket) if fold else None))
    with batch:
        done.wait()
    if driver is not None:
        driver.close()
