"""``emq archive restore`` and ``verify``: a floor rebuilt from the bucket alone, and the
bucket checked without writing anything."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import click

from echomq.archive.restore import restore
from echomq.archive.verify import verify
from echomq.cli.archive_options import (
    floor_gaps,
    floor_option,
    guard,
    json_option,
    rebuild_option,
)
from echomq.cli.archive_output import emit_rows, warn_gaps
from echomq.cli.remote import RemoteSettings, remote_options
from echomq.cli.text import time_option as _time


@click.command("restore")
@click.option("-q", "--queue", "queues", multiple=True, help="Only these queues (repeatable).")
@floor_option
@remote_options
@rebuild_option
@click.option("--until", help="A point in time: keep exactly the outcomes recorded up to it "
                              "(a stream id ms-seq, inclusive; or ms since the epoch or ISO "
                              "8601: that millisecond included). Restore into a fresh path.")
@json_option
def restore_cmd(queues: tuple[str, ...], floor_path: str, s3: RemoteSettings,
                rebuild_manifest: bool, until: str | None, as_json: bool) -> None:
    """Rebuild the floor from the remote alone, verified (resumes when interrupted); with
    --until, as it was at that point, verified along the chain up to it.

    Refuses a missing or corrupt slice, a broken chain and (unless --rebuild-manifest) a
    bucket with slices but no manifest; with --until, only those up to the point."""
    remote = s3.need()
    point: int | str | None = until
    if until is not None and not re.fullmatch(r"[0-9]+-[0-9]+", until):
        point = _time(until)  # ms or ISO 8601; a stream id goes as it is
    out: dict[str, Any] = {}
    guard(lambda: out.update(restore(remote, floor_path, list(queues) or None,
                                      progress=None if not as_json else False,
                                      rebuild_manifest=rebuild_manifest, until=point)))
    emit_rows(as_json, [r.to_dict() for r in out.values()], "restore")


@click.command("verify")
@click.option("-q", "--queue", "queues", multiple=True, help="Only these queues (repeatable).")
@remote_options
@floor_option
@click.option("--pin", "pins", multiple=True, metavar="QUEUE=DIGEST",
              help="A head_digest kept from an earlier report; it must still be on QUEUE's "
                   "chain (repeatable).")
@rebuild_option
@json_option
def verify_cmd(queues: tuple[str, ...], s3: RemoteSettings, floor_path: str,
               pins: tuple[str, ...], rebuild_manifest: bool, as_json: bool) -> None:
    """Check every slice's checksum and digest, and that each queue's chain is whole; with
    a floor (--floor, when it exists) also that the bucket holds every slice it uploaded,
    and list the stream losses the floor recorded; each queue's verdict is kept in that
    floor (the dashboard's archive page shows it). Exits 1 on a loss not acknowledged."""
    for pin in pins:
        if not all(pin.partition("=")[::2]):
            raise click.BadParameter(f"{pin!r} is not QUEUE=DIGEST", param_hint="--pin")
    remote = s3.need()
    kept = dict(pin.partition("=")[::2] for pin in pins)
    against = floor_path if Path(floor_path, "data.mdb").exists() else None
    out: dict[str, Any] = {}
    guard(lambda: out.update(verify(remote, list(queues) or None,
                                     progress=None if not as_json else False,
                                     floor=against, rebuild_manifest=rebuild_manifest,
                                     pins=kept)))
    gaps = floor_gaps(floor_path) or {}
    rows = []
    for name, report in out.items():
        row = report.to_dict()
        row["gaps"] = len([g for g in gaps.get(name, ()) if not g.acknowledged])
        row["gaps_acknowledged"] = len([g for g in gaps.get(name, ()) if g.acknowledged])
        rows.append(row)
    emit_rows(as_json, rows, "verify")
    shown = [g for name in out for g in gaps.get(name, ())]
    warn_gaps(shown)
    if any(not g.acknowledged for g in shown):
        sys.exit(1)
