"""Cron arithmetic on APScheduler 3's ``CronTrigger``: parse, and find fire times.

Times cross this module as integer epoch milliseconds (the server clock's unit); fire
times are whole seconds, as ``CronTrigger`` computes them. ``latest_fire`` finds the
LATEST fire time in a window by bisection over ``get_next_fire_time`` (monotone in its
start), so a scheduler that was down for a year costs ~40 trigger steps, not one per
missed tick: that is what makes a coalesced catch-up cheap. Fire times are once per
wall-clock time in the schedule's zone (see ``_next_s`` for the two DST nights).
"""

from __future__ import annotations

from datetime import UTC, datetime

from apscheduler.triggers.cron import CronTrigger

from echomq.errors import InvalidArgument

_FIELDS = ("second", "minute", "hour", "day", "month", "day_of_week")


def parse(cron: object, timezone: object) -> CronTrigger:
    """A trigger for ``cron`` in ``timezone``, or ``InvalidArgument`` naming what is wrong.

    Five fields are a crontab line (minute hour day month day_of_week); six put seconds
    first, for seconds-level schedules. Weekday NUMBERS follow APScheduler 3 (0 = Monday,
    not Sunday as in crontab); the names ``mon``..``sun`` mean the same everywhere.
    A schedule that can never fire (``0 0 30 2 *``) is refused.
    """
    if not isinstance(cron, str):
        raise InvalidArgument(f"cron must be a str, got {type(cron).__name__}")
    if not isinstance(timezone, str) or not timezone:
        raise InvalidArgument(f"timezone must be a zone name such as 'UTC', got {timezone!r}")
    if not cron.isascii():  # APScheduler reads "٣٠" as 30: a field is what it looks like
        raise InvalidArgument(f"cron {cron!r} must be written in ASCII (digits 0-9)")
    fields = cron.split()
    if len(fields) not in (5, 6):
        raise InvalidArgument(
            f"cron {cron!r} has {len(fields)} fields; give 5 (minute hour day month "
            "day_of_week) or 6 (second first)"
        )
    values = dict(zip(_FIELDS[6 - len(fields):], fields, strict=True))
    try:
        trigger = CronTrigger(**values, timezone=timezone)
    except (ValueError, KeyError, TypeError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise InvalidArgument(f"cron {cron!r} in timezone {timezone!r} is refused: "
                              f"{str(exc).strip(chr(39))}") from exc
    if next_fire(trigger, _now_ms()) is None:
        raise InvalidArgument(f"cron {cron!r} never fires")
    return trigger


def _now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


def _at(second: int) -> datetime:
    return datetime.fromtimestamp(second, UTC)


def _next_s(trigger: CronTrigger, second: int) -> int | None:
    """The first fire time (epoch seconds) at or after ``second``, once per wall-clock
    time: on a fall-back night the hour that comes twice fires only the first time (a
    ``30 2 * * *`` in Paris fires at 02:30 CEST, not again at 02:30 CET). A wall-clock
    time a spring-forward night skips fires as ``CronTrigger`` places it, an hour later
    on the new offset (02:30 -> 03:30 CEST), so a daily schedule still fires that day."""
    while True:
        found = trigger.get_next_fire_time(None, _at(second))
        if found is None:
            return None
        at = int(found.timestamp())
        if not _repeated(trigger, at):
            return at
        second = _after_repeat(trigger, at)


def _local(trigger: CronTrigger, second: int) -> datetime:
    return datetime.fromtimestamp(second, trigger.timezone)


def _repeated(trigger: CronTrigger, second: int) -> bool:
    """Is ``second`` the second pass of a wall-clock time (``fold=1``: the hour a
    fall-back repeats)?"""
    return _local(trigger, second).fold == 1


def _after_repeat(trigger: CronTrigger, second: int) -> int:
    """The first epoch second after the repeated stretch that holds ``second``: the
    stretch is as long as the offset fell back (an hour in most zones), so it ends
    within that many seconds; bisection finds the end in a few steps."""
    local = _local(trigger, second)
    first = local.replace(fold=0).utcoffset()
    again = local.utcoffset()
    span = int((first - again).total_seconds()) if first and again else 3600
    lo, hi = second, second + max(span, 1)  # _repeated(lo) holds, _repeated(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _repeated(trigger, mid):
            lo = mid
        else:
            hi = mid
    return hi


def next_fire(trigger: CronTrigger, from_ms: int) -> int | None:
    """The first fire time (epoch ms) at or after ``from_ms``, or None if there is none."""
    found = _next_s(trigger, -(-from_ms // 1000))
    return None if found is None else found * 1000


def latest_fire(trigger: CronTrigger, *, after_ms: int | None, since_ms: int,
                now_ms: int) -> int | None:
    """The latest fire time (epoch ms) ``t`` with ``after_ms < t``, ``since_ms <= t`` and
    ``t <= now_ms``, or None: the one fire a (possibly late) scheduler owes now."""
    lo = -(-since_ms // 1000)
    if after_ms is not None:
        lo = max(lo, after_ms // 1000 + 1)
    hi = now_ms // 1000
    first = _next_s(trigger, lo) if lo <= hi else None
    if first is None or first > hi:
        return None
    # invariant: the first fire at or after `lo` is <= hi; find the largest such lo
    lo, best = first, first
    while lo < hi:
        mid = (lo + hi + 1) // 2
        found = _next_s(trigger, mid)
        if found is not None and found <= hi:
            lo = best = found
        else:
            hi = mid - 1
    return best * 1000
