"""The options and helpers every ``emq archive`` command shares: where the floor is, the
``--json`` and ``--url`` options, a floor opened only when it exists, and an archive error
made a one-line click error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from echomq.archive.floor import Floor
from echomq.archive.floor_gaps import Gap
from echomq.errors import EchoMQError

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_FLOOR = "./.echomq/floor"


class QueueFirst(click.Command):
    """An archive command whose first arguments name its queue(s) (``audit QUEUE``,
    ``status [QUEUE]...``) that also takes them as ``-q/--queue NAME``, the spelling of
    every other command: each such option, wherever it stands, becomes a leading
    argument (``--`` ends the options, as usual)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", "The queue may also be given as -q/--queue NAME, as on "
                                    "every other emq command.")
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        valued = {opt for p in self.params if isinstance(p, click.Option)
                  and not p.is_flag and not p.count for opt in p.opts}
        queues, rest = leading_queues(args, valued)
        return super().parse_args(ctx, [*queues, *rest])


def leading_queues(args: list[str], valued: set[str]) -> tuple[list[str], list[str]]:
    """The ``-q NAME``/``--queue NAME``/``--queue=NAME``/``-qNAME`` values of ``args``
    (up to a ``--``), and the other words in their order; the word after one of the
    ``valued`` options is its value, whatever it looks like."""
    queues: list[str] = []
    rest: list[str] = []
    words = iter(args)
    for word in words:
        if word == "--":
            rest += [word, *words]
            break
        if word in valued:  # its value follows, even one that reads "-q"
            rest.append(word)
            value = next(words, None)
            if value is not None:
                rest.append(value)
        elif word in ("-q", "--queue"):
            name = next(words, None)
            if name is None:
                raise click.UsageError(f"{word} needs a queue name")
            queues.append(name)
        elif word.startswith("--queue="):
            queues.append(word.removeprefix("--queue="))
        elif word.startswith("-q") and not word.startswith("--"):
            queues.append(word[2:])
        else:
            rest.append(word)
    return queues, rest


def floor_option(fn: F) -> F:
    """``--floor`` (``$EMQ_FLOOR``): one default for every command, so they meet."""
    return click.option("--floor", "floor_path", default=DEFAULT_FLOOR, envvar="EMQ_FLOOR",
                        show_default=True, help="The LMDB floor directory.")(fn)


def json_option(fn: F) -> F:
    """``--json``: output for scripts, times in ms since the epoch."""
    return click.option("--json", "as_json", is_flag=True,
                        help="Machine-readable output (times in ms since the epoch).")(fn)


def url_option(fn: F) -> F:
    """A command's own ``--url``, which overrides the root's."""
    return click.option("--url", envvar=["EMQ_URL", "EMQ_REDIS_URL"],
                        help="Redis/Valkey URL (default: the root's --url, else the "
                             "embedded server of --data-dir).")(fn)


rebuild_option = click.option(
    "--rebuild-manifest", is_flag=True,
    help="A queue with slices but no manifest: follow the chain of slices alone (its "
         "newest history may have been cut; the report says the head found).")


def existing_floor(floor_path: str) -> Floor:
    """The floor at ``floor_path`` for a command that only reads it: one that is not
    there is refused, never created (a typo must not leave an empty floor behind)."""
    if not Path(floor_path, "data.mdb").exists():
        raise click.ClickException(f"no floor at {floor_path} (no data.mdb there)")
    return Floor(floor_path)


def floor_gaps(floor_path: str) -> dict[str, list[Gap]] | None:
    """Every queue's gaps in the floor at ``floor_path``, or None when there is no floor."""
    if not Path(floor_path, "data.mdb").exists():
        return None
    with Floor(floor_path) as floor:
        return {q: floor.gaps(q) for q in floor.queues()}


def guard(fn: Callable[[], None]) -> None:
    """Run ``fn``; an archive error becomes a one-line ``Error:`` naming its kind."""
    try:
        fn()
    except EchoMQError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from exc
