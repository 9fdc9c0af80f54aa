"""``emq metrics``: the Prometheus exposition on its own port, for a scrape target that is
not the dashboard (needs ``pip install 'echomq[metrics]'``)."""

from __future__ import annotations

import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click

from echomq.cli.app import as_click_error, connect, emit

log = logging.getLogger(__name__)


def _handler(render: Any) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        """GET /metrics answers one scrape; anything else is 404 (HEAD and POST: 501)."""

        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(HTTPStatus.NOT_FOUND, "only /metrics is served here")
                return
            try:
                body, content_type = render()
            except Exception as exc:  # a failed scrape is a 500 the scraper records
                log.warning("metrics scrape failed: %s", exc)
                self.send_error(HTTPStatus.INTERNAL_SERVER_ERROR, "the scrape failed")
                return
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("%s " + format, self.address_string(), *args)

    return Handler


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind (loopback by default: the exposition has no auth).")
@click.option("--port", default=9464, show_default=True, type=click.IntRange(0, 65535),
              help="Port to serve /metrics on (0: any free port, printed at start).")
@click.option("--floor", "floor_path", default=None, envvar="EMQ_FLOOR",
              help="The archive's LMDB floor: adds the fold duration and measures the "
                   "archive lag from its checkpoint.")
@click.option("--once", is_flag=True, help="Print one scrape to stdout and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print the start line as JSON.")
@click.pass_context
def metrics(ctx: click.Context, host: str, port: int, floor_path: str | None, once: bool,
            as_json: bool) -> None:
    """Serve Prometheus metrics of every queue at http://HOST:PORT/metrics, computed at
    each scrape from Redis (and the floor).

    Refuses a --floor folder that holds no floor (it never creates one), a port that is
    taken, and runs only with prometheus_client installed (the `metrics` extra).
    """
    try:
        from echomq.prometheus import render
    except ImportError as exc:
        raise click.ClickException("emq metrics needs prometheus_client: "
                                   "pip install 'echomq[metrics]'") from exc
    from echomq.archive.floor import Floor

    if floor_path is not None and not Path(floor_path, "data.mdb").exists():
        raise click.ClickException(f"no floor at {floor_path} (no data.mdb there)")
    conn = connect(ctx, start=False)
    with as_click_error():
        floor = Floor(floor_path) if floor_path is not None else None
    try:
        if once:
            click.echo(render(conn, floor)[0].decode(), nl=False)
            return
        try:
            server = ThreadingHTTPServer((host, port), _handler(lambda: render(conn, floor)))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from exc
        bound = server.server_address[1]
        emit({"url": f"http://{host}:{bound}/metrics", "queues_from": conn.safe_url,
              "floor": floor_path}, as_json)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    finally:
        if floor is not None:
            floor.close()
