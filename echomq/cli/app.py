"""The root of ``emq``: its options, the one options context every command reads, and the
lazy table of commands.

Every command takes ``--url`` (or ``$EMQ_URL``); with none, it runs against the embedded
Valkey of ``--data-dir``: ONE persistent server per folder, started by the first command
that writes (enqueue, worker, ...) and left running for the next, until ``emq server
stop``. A command that only reads (status, show, jobs, ...) never starts one: with none
running it says so (``start=False``, :func:`running_url`).

Commands load on first use (:class:`LazyGroup`): ``emq worker`` imports the worker and
nothing of the archive (boto3, LMDB) or of rich.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from echomq.errors import EchoMQError

if TYPE_CHECKING:
    from echomq.queue.connection import Connection

COMMANDS = {
    "worker": "echomq.cli.worker:worker",
    "scheduler": "echomq.cli.worker:scheduler",
    "enqueue": "echomq.cli.queue:enqueue",
    "cancel": "echomq.cli.queue:cancel",
    "sweep": "echomq.cli.queue:sweep",
    "reap": "echomq.cli.queue:reap",
    "dead": "echomq.cli.queue:dead",
    "purge": "echomq.cli.queue:purge",
    "drain": "echomq.cli.bulk:drain",
    "obliterate": "echomq.cli.bulk:obliterate",
    "status": "echomq.cli.queue:status",
    "queues": "echomq.cli.queues:queues",
    "pause": "echomq.cli.control:pause",
    "resume": "echomq.cli.control:resume",
    "retry": "echomq.cli.control:retry",
    "remove": "echomq.cli.control:remove",
    "promote": "echomq.cli.control:promote",
    "jobs": "echomq.cli.control:jobs",
    "show": "echomq.cli.control:show",
    "rate-limit": "echomq.cli.rates:rate_limit",
    "retention": "echomq.cli.retention:retention",
    "schedule": "echomq.cli.cron:schedule",
    "unschedule": "echomq.cli.cron:unschedule",
    "schedules": "echomq.cli.cron:schedules",
    "pause-schedule": "echomq.cli.cron:pause_schedule",
    "resume-schedule": "echomq.cli.cron:resume_schedule",
    "workers": "echomq.cli.workers:workers",
    "server": "echomq.cli.server:server",
    "archive": "echomq.cli.archive:archive",
    "demo": "echomq.cli.demo:demo",
    "metrics": "echomq.cli.metrics:metrics",
    "wait": "echomq.cli.watch:wait",
    "events": "echomq.cli.watch:events",
    "dashboard": "echomq.cli.dashboard:dashboard",
}
"""Every ``emq`` command: its name and where it lives (``module:attribute``)."""


@dataclass
class Options:
    """The root options, shared by every command through ``ctx.obj``; one connection per
    invocation, opened on first use."""

    url: str | None = None
    executor: str = "scripts"
    data_dir: str | None = None
    prefix: str = "emq"
    _conn: Connection | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls) -> Options:
        """What the root would have parsed, for a group invoked on its own (tests, embedders)."""
        return cls(os.environ.get("EMQ_URL"), os.environ.get("EMQ_EXECUTOR", "scripts"),
                   os.environ.get("EMQ_DATA_DIR"), os.environ.get("EMQ_PREFIX", "emq"))

    def connect(self, url: str | None = None, *, start: bool = True) -> Connection:
        """The invocation's connection; ``url`` (a subcommand's own ``--url``) overrides
        the root's. A ConnectionFailed becomes a one-line error (its text is redacted).

        With no URL, the folder's shared server, started if none runs; ``start=False`` (a
        command that only reads) uses it only if one runs: starting a server to read an
        empty one would answer nothing and leave a process behind."""
        if self._conn is None:
            from echomq.queue.connection import check_choices, connect

            with as_click_error():
                target = url or self.url
                if target is None and not start:
                    target = running_url(self.data_dir)
                elif target is None:
                    check_choices(self.executor, self.prefix)  # before a server starts
                    target = shared_url(self.data_dir)
                self._conn = connect(target, executor=self.executor,  # type: ignore[arg-type]
                                     prefix=self.prefix)
        return self._conn


def shared_url(data_dir: str | None) -> str:
    """The URL of the folder's shared server, started if none runs (as ``echomq.connect()``
    without a URL does)."""
    from echomq.servers.shared import SharedValkey

    return SharedValkey(data_dir).ensure().url


def running_url(data_dir: str | None) -> str:
    """The URL of the folder's running shared server; a one-line error naming the folder
    when none runs. Never starts one, and creates nothing when the folder is missing."""
    from echomq.servers.shared import SharedValkey

    shared = SharedValkey(data_dir)
    info = shared.find() if shared.data_dir.is_dir() else None
    if info is None:
        raise click.ClickException(
            f"no server is running for {shared.data_dir} (`emq server start`)")
    return info.url


def options(ctx: click.Context) -> Options:
    """The invocation's :class:`Options` (from the environment when no root ran)."""
    found = ctx.find_object(Options)
    if found is None:
        found = ctx.find_root().obj = Options.from_env()
    return found


def connect(ctx: click.Context, url: str | None = None, *, start: bool = True) -> Connection:
    """The invocation's connection (see :meth:`Options.connect`); ``start=False`` for a
    command that only reads."""
    return options(ctx).connect(url, start=start)


@contextlib.contextmanager
def as_click_error() -> Iterator[None]:
    """An EchoMQError, an OSError (a path that is a folder, unreadable, missing) or an
    error of boto (S3) becomes a one-line ``Error: ...`` and exit status 1, not a
    traceback."""
    try:
        yield
    except EchoMQError as exc:
        raise click.ClickException(one_line(str(exc))) from exc
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        raise click.ClickException(one_line(f"{exc.strerror or exc}{where}")) from exc
    except Exception as exc:  # boto's own (no credentials, no such bucket): one line too
        if type(exc).__module__.split(".")[0] not in ("botocore", "boto3"):
            raise
        raise click.ClickException(one_line(f"S3: {exc}")) from exc


def one_line(message: str) -> str:
    """A message of several lines (DuckDB's adds the SQL and a caret line under it) as
    one: its lines joined by ``; ``, the caret lines dropped."""
    lines = [line.strip() for line in message.splitlines()]
    return "; ".join(line for line in lines if line and set(line) != {"^"})


def json_argument(text: str, what: str = "payload") -> Any:
    """``text`` decoded as JSON; anything else (not JSON, nested too deep for the
    decoder) is a one-line BadParameter naming ``what``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{what} is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise click.BadParameter(f"{what} is nested too deeply to decode") from exc


def emit(data: Any, as_json: bool) -> None:
    """Print ``data`` as one JSON document, or for people: a dict as ``key: value``
    lines, a structured value as JSON, times as ISO 8601 (see :mod:`echomq.cli.text`)."""
    from echomq.cli.text import human

    if as_json:
        click.echo(json.dumps(data, default=str))
    elif isinstance(data, dict):
        for key, value in data.items():
            click.echo(f"{key}: {human(value, str(key))}")
    else:
        click.echo(human(data))


class Group(click.Group):
    """A group whose commands never end in a traceback for a refusal: what a command did
    not turn into a one-line error itself is made one here (:func:`as_click_error`)."""

    def invoke(self, ctx: click.Context) -> Any:
        with as_click_error():
            return super().invoke(ctx)


class LazyGroup(Group):
    """A group whose commands are imported when named, so that one command does not pay
    for the imports of all the others."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        module, _, attr = self.lazy[cmd_name].partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command), self.lazy[cmd_name]
        return command


@click.group(cls=LazyGroup, lazy=COMMANDS)
@click.option("--url", envvar="EMQ_URL", default=None,
              help="redis://, rediss:// or unix:// URL; default: the embedded Valkey of "
              "--data-dir.")
@click.option("--executor", type=click.Choice(["scripts", "functions"]), default="scripts",
              envvar="EMQ_EXECUTOR", show_default=True)
@click.option("--data-dir", envvar="EMQ_DATA_DIR", default=None,
              help="Folder of the embedded Valkey used without --url: one shared, "
              "persistent server per folder (default ./.echomq/valkey).")
@click.option("--prefix", envvar="EMQ_PREFIX", default="emq", show_default=True,
              help="The first part of every key EchoMQ writes: one deployment or tenant "
              "(letters, digits, _.-; no ':', so the ACL ~PREFIX:* holds only it).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
@click.pass_context
def main(ctx: click.Context, url: str | None, executor: str, data_dir: str | None,
         prefix: str, log_level: str) -> None:
    """EchoMQ: a reliable job queue on Redis/Valkey with a durable archive."""
    logging.basicConfig(level=log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for chatty in ("botocore", "boto3", "urllib3", "apscheduler"):  # their INFO is noise here
        logging.getLogger(chatty).setLevel(max(logging.WARNING, logging.getLevelName(log_level)))
    ctx.obj = Options(url, executor, data_dir, prefix)
