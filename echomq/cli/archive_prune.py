"""``emq archive prune`` and ``emq archive compact``: retention and compaction of the archive."""

from __future__ import annotations

from pathlib import Path

import click

from echomq.archive.compact import DEFAULT_TARGET_BYTES, compact
from echomq.archive.prune import keep_of, prune, set_keep
from echomq.cli.app import as_click_error, connect, emit
from echomq.cli.archive_options import QueueFirst
from echomq.cli.durations import Duration
from echomq.cli.remote import RemoteSettings, remote_options
from echomq.cli.text import human
from echomq.queue.declared import declared_queues

DEFAULT_FLOOR = "./.echomq/floor"
_url = click.option("--url", envvar=["EMQ_URL", "EMQ_REDIS_URL"],
                    help="Redis/Valkey URL (default: the root's --url, else the embedded "
                         "server of --data-dir).")
_json = click.option("--json", "as_json", is_flag=True,
                     help="Machine-readable output (times in ms since the epoch).")
_wait = click.option("--wait", "wait_ms", type=Duration(), default="0s", show_default=True,
                     help="How long to wait for a fold holding the queue's fold lease.")


@click.command("prune", cls=QueueFirst)
@click.argument("queues", nargs=-1)
@click.option("--keep", type=Duration(),
              help="Forget outcomes older than this (400d, 12w); default: each queue's "
                   "stored policy.")
@click.option("--save", is_flag=True, help="Store --keep as the queues' policy (what the "
                                           "scheduler and later prunes apply).")
@click.option("--floor", "floor_path", default=DEFAULT_FLOOR, envvar="EMQ_FLOOR",
              show_default=True, help="The LMDB floor directory (used when it exists).")
@remote_options
@_url
@_wait
@_json
@click.pass_context
def prune_cmd(ctx: click.Context, queues: tuple[str, ...], keep: int | None, save: bool,
              floor_path: str, s3: RemoteSettings, url: str | None, wait_ms: int,
              as_json: bool) -> None:
    """Forget QUEUES' archived outcomes older than --keep (default: every declared queue
    with a stored policy) in the floor and the bucket. Slices are dropped whole, once
    their newest outcome is older than the cutoff; the manifest records what was dropped.

    Refuses a queue with no policy and no --keep, a floor that uploads to a bucket
    without that bucket (both must forget the same slices), and a queue whose fold lease
    is held past --wait (a fold or a compaction is running)."""
    conn = connect(ctx, url)
    remote = s3.build()
    floor = floor_path if Path(floor_path, "data.mdb").exists() else None
    names = list(queues) or [q for q in declared_queues(conn)
                             if keep is not None or keep_of(conn, q) is not None]
    rows = []
    with as_click_error():
        if save and keep is None:
            raise click.UsageError("--save stores --keep: give --keep")
        if floor is None and remote is None:
            raise click.UsageError(f"no floor at {floor_path} and no --bucket: nothing to "
                                   "prune")
        for queue in names:
            if save:
                set_keep(conn, queue, keep)
            rows.append(prune(conn, queue, floor=floor, remote=remote, keep=keep,
                              wait_ms=wait_ms).to_dict())
    emit(rows if as_json else {r["queue"]: _prune_line(r) for r in rows} or "nothing to prune",
         as_json)


def _prune_line(row: dict[str, object]) -> str:
    return (f"{row['slices']} slices, {row['entries']} entries dropped through "
            f"{human(row['through'], 'through')} ({row['policy']}); floor forgot "
            f"{row['floor_entries']}, "
            f"{row['deleted']} objects deleted")


@click.command("compact", cls=QueueFirst)
@click.argument("queues", nargs=-1)
@click.option("--target-bytes", type=click.IntRange(min=1), default=DEFAULT_TARGET_BYTES,
              show_default=True, help="The size a pack grows to (compressed bytes).")
@remote_options
@_url
@_wait
@_json
@click.pass_context
def compact_cmd(ctx: click.Context, queues: tuple[str, ...], target_bytes: int,
                s3: RemoteSettings, url: str | None, wait_ms: int, as_json: bool) -> None:
    """Merge QUEUES' small slice objects (default: every declared queue) into packs of
    about --target-bytes: write the packs, switch the manifest, then delete the old.

    Refuses without --bucket, a chain that does not verify (ChainBroken: run verify), a
    manifest that moved under it (nothing is deleted then), and a queue whose fold lease
    is held past --wait. The newest object is never merged."""
    conn = connect(ctx, url)
    remote = s3.need()
    rows = []
    with as_click_error():
        for queue in list(queues) or declared_queues(conn):
            rows.append(compact(conn, remote, queue, target_bytes=target_bytes,
                                wait_ms=wait_ms).to_dict())
    emit(rows if as_json else {r["queue"]: f"{r['objects_before']} -> {r['objects_after']} "
                               f"objects, {r['packs']} packs written, {r['deleted']} deleted"
                               for r in rows} or "nothing to compact", as_json)
