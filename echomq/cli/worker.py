"""``emq worker`` and ``emq scheduler``: the long-running processes."""

from __future__ import annotations

import importlib
import signal
import sys
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import click

from echomq.cli.app import connect
from echomq.cli.remote import RemoteSettings, remote_options
from echomq.worker import Consumer


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


@click.command()
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
        connect(ctx), queue, func, concurrency=concurrency, lease_ms=lease_ms,
        prefetch=prefetch, batch_size=batch_size, cancel=cancel, record=record,
        recovery=recovery,  # type: ignore[arg-type]
        max_stalled=max_stalled, auto_extend=auto_extend, shutdown_grace_ms=grace_ms,
    )
    consumer.run()


@click.command()
@click.option("--queue", "-q", "queues", multiple=True, help="Sweep these queues.")
@click.option("--interval-ms", default=30_000, show_default=True)
@click.option("--max-stalled", default=1, show_default=True)
@click.option("--cron/--no-cron", default=True, show_default=True,
              help="Fire the cron schedules of every queue of the prefix (each fire once, "
              "however many schedulers run).")
@click.option("--cron-interval-ms", default=1_000, show_default=True,
              help="How often to look for due cron fires.")
@click.option("--fold/--no-fold", default=False, help="Also fold every declared stream.")
@click.option("--fold-interval-ms", default=60_000, show_default=True)
@click.option("--fold-lease-ms", type=int, default=None,
              help="The fold lease, kept between passes by a driver sharing the declared "
              "queues with others; a dead driver's queues move on within it. Default: "
              "twice --fold-interval-ms, at least 30 s; refused below the interval.")
@click.option("--driver-name", default=None,
              help="How other drivers name this one when it holds a queue (default "
              "host:pid).")
@click.option("--floor", default=".echomq/floor", show_default=True,
              help="The LMDB floor; the remote comes from --bucket and the other S3 "
              "options (EMQ_S3_*; no bucket: floor only).")
@click.option("--claim-record", is_flag=True,
              help="With --fold: claim the archive of record of a declared queue that has "
              "none for this floor even without a bucket, so its stream is trimmed (a "
              "floor alone never claims it unasked; `emq archive declare Q --record "
              "floor` names it once instead).")
@click.option("--retention/--no-retention", default=True, show_default=True,
              help="Apply every queue's retention policy (emq retention).")
@click.option("--retention-interval-ms", default=60_000, show_default=True)
@click.option("--prune-interval-ms", default=3_600_000, show_default=True,
              help="With --fold: how often each declared queue's archive retention (emq "
              "archive prune --keep ... --save) is applied to the floor and the bucket.")
@remote_options
@click.pass_context
def scheduler(ctx: click.Context, queues: tuple[str, ...], interval_ms: int, max_stalled: int,
              cron: bool, cron_interval_ms: int, fold: bool, fold_interval_ms: int,
              fold_lease_ms: int | None, driver_name: str | None, floor: str,
              claim_record: bool, retention: bool, retention_interval_ms: int,
              prune_interval_ms: int, s3: RemoteSettings) -> None:
    """Run the cron schedules, the stalled sweep, the archive fold and retention on
    APScheduler until interrupted. Refuses to start with nothing to schedule (--no-cron,
    --no-retention, no --queue, no --fold), and a fold lease no longer than the fold
    interval. Several schedulers with --fold share the declared queues."""
    from echomq.jobs.scheduler import BatchScheduler

    if not queues and not fold and not retention and not cron:
        raise click.UsageError(
            "nothing to schedule: give --cron, --queue, --fold and/or --retention")
    lease_ms = fold_lease_ms or max(30_000, 2 * fold_interval_ms)
    if fold and lease_ms <= fold_interval_ms:
        raise click.UsageError(
            f"--fold-lease-ms {lease_ms} must outlast --fold-interval-ms "
            f"{fold_interval_ms}: a driver keeps its queues between passes")
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
                        claim_record=True if claim_record else None)
        batch.add_fold(driver.fold_declared, interval_ms=fold_interval_ms)
        batch.add_fold(partial(prune_declared, conn, driver.floor, driver.remote),
                       interval_ms=prune_interval_ms, name="prune")
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    with batch:
        done.wait()
    if driver is not None:
        driver.close()
