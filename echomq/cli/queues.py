"""``emq queues``: every queue of the prefix, one SCAN of every primary (each Cluster
primary with its own cursor) plus the declared, retained and cron sets."""

from __future__ import annotations

import click

import echomq
from echomq.cli.app import as_click_error, connect, emit


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print {\"queues\": [...]}.")
@click.pass_context
def queues(ctx: click.Context, as_json: bool) -> None:
    """List every queue of the prefix: declared, retained, with cron schedules, or ever
    added to (a full SCAN of the keyspace, on a Cluster of every primary).

    Refuses nothing but a server it cannot reach."""
    conn = connect(ctx, start=False)
    with as_click_error():
        names = echomq.queues(conn)
    if as_json:
        emit({"queues": names}, True)
    else:
        for name in names:
            click.echo(name)
