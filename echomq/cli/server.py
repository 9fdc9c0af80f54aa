"""``emq server``: the embedded Valkey of ``--data-dir`` (start, status, stop), and a
development S3 endpoint in the foreground (``emq server s3``)."""

from __future__ import annotations

import sys
from typing import Any

import click
import redis

from echomq.cli.app import as_click_error, emit, options
from echomq.errors import ConnectionFailed
from echomq.queue.connection import redact_url
from echomq.servers.shared import ServerInfo, SharedValkey


@click.group()
def server() -> None:
    """The embedded Valkey of --data-dir: one persistent server per folder, shared by
    every command without --url and by echomq.connect() without a URL. It is yours
    alone: a unix socket in the folder (0700) and a password in
    FOLDER/emq-server.conf.json (0600); TCP only with `start --tcp`."""


def _describe(info: ServerInfo) -> dict[str, Any]:
    """What to show of a server: never its password (the URLs are redacted)."""
    tcp = info.tcp_url
    return {"url": redact_url(info.url), "tcp_url": redact_url(tcp) if tcp else None,
            "pid": info.pid, "data_dir": info.data_dir}


def _shared(ctx: click.Context) -> SharedValkey:
    return SharedValkey(options(ctx).data_dir)


@server.command("start")
@click.option("--tcp/--no-tcp", default=None,
              help="Also listen on 127.0.0.1 (password required), or stop doing so; "
                   "kept for the folder's next starts.  [default: as before, else off]")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="The TCP port (implies --tcp).  [default: the folder's last, else free]")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def server_start(ctx: click.Context, tcp: bool | None, port: int | None,
                 as_json: bool) -> None:
    """Start the folder's server (or find the running one) and print where it listens."""
    with as_click_error():
        info = SharedValkey(options(ctx).data_dir, tcp=tcp, port=port).ensure()
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
@click.option("--yes", is_flag=True,
              help="Stop it although clients (workers, dashboards...) are connected.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def server_stop(ctx: click.Context, yes: bool, as_json: bool) -> None:
    """Stop the folder's server; its AOF keeps every job for the next start.

    With clients connected (workers, schedulers, dashboards: they lose their server),
    it says how many and asks first; without a terminal to ask on it refuses unless
    --yes. An idle server stops without a question."""
    shared = _shared(ctx)
    try:
        found = shared.find()
        clients = _clients(found) if found is not None else 0
    except ConnectionFailed:  # it does not answer: none can be using it; stop() still can
        clients = 0
    if clients and not yes:
        question = (f"{clients} client(s) are connected to the server of "
                    f"{shared.data_dir} (workers, schedulers, dashboards...)")
        if not _on_a_terminal():
            raise click.UsageError(f"{question}; pass --yes to stop it anyway")
        click.confirm(f"{question}: stop it?", abort=True)
    with as_click_error():
        info = shared.stop()
    if as_json:
        emit({"stopped": info is not None, "data_dir": str(shared.data_dir),
              "pid": info.pid if info else None, "clients": clients}, True)
    elif info is None:
        click.echo(f"no server running for {shared.data_dir}")
    else:
        click.echo(f"stopped the server of {info.data_dir} (pid {info.pid}; "
                   f"{clients} client(s) were connected)")


def _on_a_terminal() -> bool:
    """Whether a question can be answered (stdin is a terminal)."""
    return sys.stdin.isatty()


def _clients(info: ServerInfo) -> int:
    """Connections to the server other than the one asking (CLIENT LIST minus itself)."""
    client = redis.Redis.from_url(info.url, socket_timeout=5)
    try:
        own = client.client_id()
        return sum(1 for c in client.client_list() if int(c["id"]) != own)
    except redis.RedisError as exc:
        raise ConnectionFailed(f"cannot count the clients of the server of "
                               f"{info.data_dir}: {exc}") from exc
    finally:
        client.close()


@server.command("s3")
@click.argument("folder", default=".echomq/seaweedfs")
@click.option("--port", envvar="EMQ_S3_PORT", default=8333, show_default=True)
def server_s3(folder: str, port: int) -> None:
    """A local SeaweedFS S3 endpoint in FOLDER, in the foreground until Ctrl-C (for
    development: it prints the endpoint and the credentials to use)."""
    from echomq.servers.seaweed import serve

    with as_click_error():
        serve(folder, port)
