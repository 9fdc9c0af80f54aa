"""``emq dashboard``: the web dashboard, served by uvicorn (needs ``echomq[web]``)."""

from __future__ import annotations

import click

from echomq.cli.app import connect, emit
from echomq.errors import EchoMQError


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind; the default is reachable from this machine only.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--floor", "floor_path", envvar="EMQ_FLOOR", default=None,
              help="The archive's LMDB floor: shows the archive and jobs Redis forgot.")
@click.option("--token", envvar="EMQ_DASHBOARD_TOKEN", default=None,
              help="Require this token on every request (login form or bearer header).")
@click.option("--read-only", is_flag=True, help="Hide and refuse every action.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Also answer requests whose Host is NAME (repeatable; '*': any). "
                   "Without it only the bound address (and, on loopback, localhost) "
                   "is answered: no DNS rebinding.")
@click.option("--json", "as_json", is_flag=True,
              help="Print where it listens as one JSON line before serving.")
@click.pass_context
def dashboard(ctx: click.Context, host: str, port: int, floor_path: str | None,
              token: str | None, read_only: bool, allowed_hosts: tuple[str, ...],
              as_json: bool) -> None:
    """Serve the dashboard: every queue, its jobs, dead letters and the archive.

    Refuses to start without the web extra (pip install 'echomq[web]'), with an empty
    --token, or on a host other than 127.0.0.1/localhost/::1 without --token or
    --read-only (anyone who reaches it could act on the queues)."""
    try:
        import uvicorn

        from echomq.web import create_app
        from echomq.web.hosts import allowed_names
    except ImportError as exc:
        raise click.ClickException(
            f"the dashboard needs the web extra: pip install 'echomq[web]' ({exc})") from exc
    if token is not None and not token.strip():
        raise click.BadParameter("must not be empty", param_hint="--token")
    if host not in ("127.0.0.1", "localhost", "::1") and token is None and not read_only:
        raise click.BadParameter(f"{host} is reachable from other machines: give --token "
                                 "or --read-only", param_hint="--host")
    try:
        allowed_names(allowed_hosts)
    except EchoMQError as exc:
        raise click.BadParameter(str(exc), param_hint="--allowed-host") from exc
    app = create_app(connect(ctx), floor=floor_path, token=token, read_only=read_only,
                     allowed_hosts=allowed_hosts)
    emit({"url": f"http://{host}:{port}/", "read_only": read_only,
          "token": token is not None, "floor": floor_path}, as_json)
    uvicorn.run(app, host=host, port=port, log_level="warning")
