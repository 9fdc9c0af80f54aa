"""``emq archive replay``: enqueue an archived job again, from the floor alone."""

from __future__ import annotations

import click

from echomq.archive.replay import replay
from echomq.cli.app import as_click_error, connect, emit

DEFAULT_FLOOR = "./.echomq/floor"


@click.command("replay")
@click.option("-q", "--queue", required=True, help="The queue the archived job ran on.")
@click.argument("job_id")
@click.option("--to-queue", help="Enqueue the replay on this queue (default: --queue).")
@click.option("--floor", "floor_path", default=DEFAULT_FLOOR, envvar="EMQ_FLOOR",
              show_default=True, help="The LMDB floor directory.")
@click.option("--url", envvar=["EMQ_URL", "EMQ_REDIS_URL"],
              help="Redis/Valkey URL (default: the root's --url, else the embedded server "
                   "of --data-dir).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def replay_cmd(ctx: click.Context, queue: str, job_id: str, to_queue: str | None,
               floor_path: str, url: str | None, as_json: bool) -> None:
    """Enqueue JOB_ID's archived payload (its last archived outcome) as a new job that
    names its origin (replay_of), even when Redis forgot the job long ago.

    Refuses a job the floor holds no outcome of (JobNotArchived), one whose outcome was
    recorded without its payload (PayloadNotRecorded: declare with --payload) and one
    whose recorded payload is not JSON (PayloadUnreadable)."""
    conn = connect(ctx, url)
    with as_click_error():
        new_id = replay(conn, floor_path, queue, job_id, to_queue=to_queue)
    emit({"job_id": new_id, "queue": to_queue or queue, "replay_of": f"{queue}/{job_id}"},
         as_json)
