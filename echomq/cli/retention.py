"""``emq retention``: show, set or clear a queue's retention policy, or apply it now."""

from __future__ import annotations

import click

import echomq
from echomq.cli.app import as_click_error, connect, emit
from echomq.cli.durations import DURATION, format_duration_ms
from echomq.records import Retention


def describe(policy: Retention) -> dict[str, str | int | None]:
    """The policy as an operator reads it: ages as durations (``--json`` gives ms)."""
    return {name.removesuffix("_ms"): (
        format_duration_ms(v) if v is not None and name.endswith("_age_ms") else v)
        for name, v in policy.as_dict().items()}


@click.command()
@click.option("--queue", "-q", required=True)
@click.option("--completed-age", type=DURATION, default=None,
              help="Forget completed rows older than this (30s, 15m, 12h, 7d, 400d).")
@click.option("--completed-count", type=int, default=None,
              help="Keep at most this many completed rows (the newest).")
@click.option("--dead-age", type=DURATION, default=None, help="Forget dead rows older than this.")
@click.option("--dead-count", type=int, default=None,
              help="Keep at most this many dead rows (the newest).")
@click.option("--clear", is_flag=True, help="Remove the whole policy (nothing is forgotten).")
@click.option("--apply", "apply_now", is_flag=True,
              help="Apply the policy now (the scheduler does it on its interval).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def retention(ctx: click.Context, queue: str, completed_age: int | None,
              completed_count: int | None, dead_age: int | None, dead_count: int | None,
              clear: bool, apply_now: bool, as_json: bool) -> None:
    """Show QUEUE's retention policy; with limits, change them (the others stay).

    A finished row is forgotten once past either limit of its state. On a declared
    queue a row goes only once the archive has folded its outcome: rows not folded yet
    are kept for the archive. Refuses a zero or negative age, a negative count, a
    duration without a unit, and --clear together with limits.
    """
    given = {"completed_age_ms": completed_age, "completed_count": completed_count,
             "dead_age_ms": dead_age, "dead_count": dead_count}
    changes = {k: v for k, v in given.items() if v is not None}
    if clear and changes:
        raise click.UsageError("--clear removes the whole policy; give no limits with it")
    conn = connect(ctx, start=bool(changes or clear or apply_now))  # showing only reads
    with as_click_error():
        policy = echomq.retention(conn, queue)
        if clear:
            policy = echomq.set_retention(conn, queue)
        elif changes:
            policy = echomq.set_retention(conn, queue, **{**policy.as_dict(), **changes})
        out: dict[str, object] = {"queue": queue,
                                  **(policy.as_dict() if as_json else describe(policy))}
        if apply_now:
            report = echomq.apply_retention(conn, queue)
            out["forgotten"] = report.forgotten
            out["kept_for_archive"] = report.kept_for_archive
    emit(out, as_json)
