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
