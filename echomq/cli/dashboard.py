"""``emq dashboard``: the web dashboard, served by uvicorn (needs ``echomq[web]``)."""

from __future__ import annotations

import os
import stat

import click

from echomq.cli.app import connect, emit
from echomq.cli.durations import Duration
from echomq.errors import EchoMQError

TOKEN_ENV = "EMQ_DASHBOARD_TOKEN"


def read_token(token: str | None, token_file: str | None) -> str | None:
    """The access token: ``--token-file``, ``--token`` (with a warning: argv is public to
    every local user through ps and /proc) or ``$EMQ_DASHBOARD_TOKEN``; None without one."""
    if token is not None and token_file is not None:
        raise click.BadParameter("give the token once: --token-file or --token",
                                 param_hint="--token-file")
    hint = "--token"
    if token_file is not None:
        hint = "--token-file"
        try:
            with open(token_file, encoding="utf-8") as handle:
                mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
                if mode & 0o077:
                    raise click.BadParameter(
                        f"{token_file} is open to group or others (mode {mode:04o}): "
                        f"chmod 600 {token_file}", param_hint=hint)
                token = handle.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"cannot read {token_file}: {exc}",
                                     param_hint=hint) from exc
    elif token is not None:
        click.echo("warning: --token shows the token to every local user (ps, /proc); "
                   f"pass it in ${TOKEN_ENV} or --token-file", err=True)
    elif os.environ.get(TOKEN_ENV):
        hint, token = f"${TOKEN_ENV}", os.environ[TOKEN_ENV]
    if token is not None and not token.strip():
        raise click.BadParameter("must not be empty", param_hint=hint)
    return token


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to bind; the default is reachable from this machine only.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option("--floor", "floor_path", envvar="EMQ_FLOOR", default=None,
              help="The archive's LMDB floor: shows the archive and jobs Redis forgot.")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Require the token this file holds (mode 600) on every request "
                   f"(login form or bearer header); or set ${TOKEN_ENV}.")
@click.option("--token", default=None,
              help=f"The token itself (visible in ps: prefer ${TOKEN_ENV} or --token-file).")
@click.option("--session-ttl", "session_ttl_ms", type=Duration(), default="12h",
              show_default=True, help="How long a login lasts (30m, 12h, 7d).")
@click.option("--read-only", is_flag=True, help="Hide and refuse every action.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Also answer requests whose Host is NAME (repeatable; '*': any). "
                   "Without it only the bound address (and, on loopback, localhost) "
                   "is answered: no DNS rebinding.")
@click.option("--json", "as_json", is_flag=True,
              help="Print where it listens as one JSON line before serving.")
@click.pass_context
def dashboard(ctx: click.Context, host: str, port: int, floor_path: str | None,
              token_file: str | None, token: str | None, session_ttl_ms: int,
              read_only: bool, allowed_hosts: tuple[str, ...], as_json: bool) -> None:
    """Serve the dashboard: every queue, its jobs, dead letters and the archive.

    Refuses to start without the web extra (pip install 'echomq[web]'), with an empty
    token, a token file others can read, or on a host other than 127.0.0.1/localhost/::1
    without a token or --read-only (anyone who reaches it could act on the queues).
    Logins last --session-ttl and end with the process."""
    try:
        import uvicorn

        from echomq.web import create_app
        from echomq.web.hosts import allowed_names
    except ImportError as exc:
        raise click.ClickException(
            f"the dashboard needs the web extra: pip install 'echomq[web]' ({exc})") from exc
    if session_ttl_ms < 1000:
        raise click.BadParameter("a login must last 1s or more", param_hint="--session-ttl")
    token = read_token(token, token_file)
    if host not in ("127.0.0.1", "localhost", "::1") and token is None and not read_only:
        raise click.BadParameter(f"{host} is reachable from other machines: give a token "
                                 f"(${TOKEN_ENV}, --token-file or --token) or --read-only",
                                 param_hint="--host")
    try:
        allowed_names(allowed_hosts)
    except EchoMQError as exc:
        raise click.BadParameter(str(exc), param_hint="--allowed-host") from exc
    app = create_app(connect(ctx), floor=floor_path, token=token, read_only=read_only,
                     session_ttl_s=session_ttl_ms / 1000, allowed_hosts=allowed_hosts)
    emit({"url": f"http://{host}:{port}/", "read_only": read_only,
          "token": token is not None, "floor": floor_path}, as_json)
    uvicorn.run(app, host=host, port=port, log_level="warning")
