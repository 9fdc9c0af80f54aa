"""``emq drain`` and ``emq obliterate``: whole-queue removals, each behind a confirmation
that names the queue and what is about to go, with a progress bar on a terminal (one step
per server call, as :mod:`echomq.queue.bulk` batches them)."""

from __future__ import annotations

import sys

import click

import echomq
from echomq.cli.app import as_click_error, connect, emit
from echomq.progress import bars
from echomq.queue.bulk import drain_batches, obliterate_batches, unarchived_entries


def confirm(question: str, yes: bool) -> None:
    """Ask ``question`` on the terminal unless ``--yes``; with no terminal to ask on,
    refuse rather than wait for an answer that never comes."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError("no terminal to confirm on: pass --yes to go ahead")
    click.confirm(question, abort=True)


@click.command()
@click.option("--queue", "-q", required=True)
@click.option("--keep-scheduled", is_flag=True,
              help="Remove pending jobs only; delayed jobs and retries waiting for their "
              "backoff stay.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def drain(ctx: click.Context, queue: str, keep_scheduled: bool, yes: bool,
          as_json: bool) -> None:
    """Remove every pending job of a queue (every group's lane too) and, unless
    --keep-scheduled, every scheduled job, in batches of at most 1,000 per call.

    Active jobs run on and settle; completed and dead jobs stay. Asks first, naming the
    counts; refuses without --yes when there is no terminal to ask on. Shows a progress
    bar on a terminal (on stderr; none with --json)."""
    conn = connect(ctx)
    with as_click_error():
        before = echomq.counts(conn, queue)
        scheduled = 0 if keep_scheduled else before.scheduled
        confirm(f"Drain queue {queue!r}: remove {before.pending} pending and {scheduled} "
                "scheduled jobs?", yes)
        removed = 0
        with bars(False if as_json else None, "drain") as task:
            tick = task(queue, before.pending + scheduled)
            for n in drain_batches(conn, queue, scheduled=not keep_scheduled):
                removed += n
                tick(n)
    emit({"queue": queue, "removed": removed, "pending": before.pending,
          "scheduled": scheduled}, as_json)


@click.command()
@click.option("--queue", "-q", required=True)
@click.option("--force", is_flag=True,
              help="Go ahead although jobs are active or the declared outcome stream holds "
              "entries the archive has not folded (that history is lost).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def obliterate(ctx: click.Context, queue: str, force: bool, yes: bool, as_json: bool) -> None:
    """Remove EVERY key of a queue: jobs in every state, groups, metrics, settings, its
    outcome stream; and take it out of the declared set. Batched: at most 1,000 keys per
    call.

    Refuses while jobs are active, and while its declared outcome stream holds entries
    the archive has not folded and trimmed (run `emq archive fold` first), unless --force.
    Asks first, naming the counts; refuses without --yes when there is no terminal to ask
    on. Adds to the queue are refused while it runs. Shows a progress bar of the keys
    removed on a terminal (on stderr; none with --json)."""
    conn = connect(ctx)
    with as_click_error():
        before = echomq.counts(conn, queue)
        waiting = unarchived_entries(conn, queue)
        if not force and before.active:
            raise echomq.QueueBusy(f"obliterate {queue!r}: {before.active} jobs are "
                                   "active; wait until they settle, or --force")
        jobs = ", ".join(f"{n} {state}" for state, n in before.as_dict().items())
        lost = f"; {waiting} outcome entries not yet archived" if waiting else ""
        confirm(f"Obliterate queue {queue!r}: {jobs}{lost}, and every other key of it?", yes)
        removed = 0
        with bars(False if as_json else None, "obliterate") as task:
            # about one key per job; the bar completes when the last key goes
            tick = task(queue, sum(n for n in before.as_dict().values()
                                   if not isinstance(n, bool)))
            for n in obliterate_batches(conn, queue, force=force):
                removed += n
                tick(n)
    emit({"queue": queue, "keys_removed": removed, **before.as_dict(),
          "unarchived_entries_lost": waiting if force else 0}, as_json)
