"""``emq server``: the embedded Valkey of ``--data-dir`` (start, status, stop), and a
development S3 endpoint in the foreground (``emq server s3``)."""

from __future__ import annotations

from typing import Any

import click

from echomq.cli.app import as_click_error, emit, options
from echomq.queue.connection import redact_url
from echomq.servers.shared import ServerInfo, SharedValkey


@click.group()
def server() -> None:
    """The embedded Valkey of --data-dir: one persistent server per folder, shared by
    every command without --url and by echomq.connect() without a URL."""


def _describe(info: ServerInfo) -> dict[str, Any]:
    return {"url": redact_url(info.url), "pid": info.pid, "data_dir": info.data_dir}


def _shared(ctx: click.Context) -> SharedValkey:
    return SharedValkey(options(ctx).data_dir)


@server.command("start")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def server_start(ctx: click.Context, as_json: bool) -> None:
    """Start the folder's server (or find the running one) and print where it listens."""
    with as_click_error():
        info = _shared(ctx).ensure()
    emit({"state": "running", **_describe(info)}, as_json)


@server.command("status")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def server_status(ctx: click.Context, as_json: bool) -> None:
    """Print the folder's server; exit status 3 when none runs (as LSB's status)."""
    shared = _shared(ctx)
    with as_click_error():
        info = shared.find()
    if info is None:
        emit({"state": "stopped", "data_dir": str(shared.data_dir)}, as_json)
        ctx.exit(3)
    emit({"state": "running", **_describe(info)}, as_json)


@server.command("stop")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def server_stop(ctx: click.Context, as_json: bool) -> None:
    """Stop the folder's server; its AOF keeps every job for the next start."""
    shared = _shared(ctx)
    with as_click_error():
        info = shared.stop()
    if as_json:
        emit({"stopped": info is not None, "data_dir": str(shared.data_dir),
              "pid": info.pid if info else None}, True)
    elif info is None:
        click.echo(f"no server running for {shared.data_dir}")
    else:
        click.echo(f"stopped the server of {info.data_dir} (pid {info.pid})")


@server.command("s3")
@click.argument("folder", default=".echomq/seaweedfs")
@click.option("--port", envvar="EMQ_S3_PORT", default=8333, show_default=True)
def server_s3(folder: str, port: int) -> None:
    """A local SeaweedFS S3 endpoint in FOLDER, in the foreground until Ctrl-C (for
    development: it prints the endpoint and the credentials to use)."""
    from echomq.servers.seaweed import serve

    with as_click_error():
        serve(folder, port)
