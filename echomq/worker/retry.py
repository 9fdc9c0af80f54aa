"""What happens after a failed attempt: the retry policy and the handler's own say.

A handler may raise :class:`Retry` (try again after a delay, counted as an attempt) or
:class:`Fail` (dead at once, whatever tries remain). Anything else it raises is judged
by a :class:`RetryPolicy`: which exceptions retry, and after what delay (a
:class:`Backoff`, a fixed delay, or a callable). The verdict is a :class:`FailPlan`
that the settler hands to the one atomic ``fail`` transition: the server counts the
tries and dead-letters the last one, so a policy never needs to read the row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from echomq.errors import MAX_RETRY_DELAY_MS, Fail, InvalidArgument, Retry
from echomq.worker.context import DEAD, FailPlan

MAX_DELAY_MS = MAX_RETRY_DELAY_MS


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``base_ms * 2**(try - 1)``, at most ``cap_ms``; with ``jitter``
    (the default) a uniformly random part of that ("full jitter"), so many jobs failing
    together do not come back together."""

    base_ms: int = 1_000
    cap_ms: int = 3_600_000
    jitter: bool = True

    def __post_init__(self) -> None:
        _delay(self.base_ms, "Backoff base_ms", positive=True)
        _delay(self.cap_ms, "Backoff cap_ms", positive=True)
        if self.cap_ms < self.base_ms:
            raise InvalidArgument(f"Backoff cap_ms ({self.cap_ms}) is below base_ms "
                                  f"({self.base_ms})")


@dataclass(frozen=True)
class Fixed:
    """The same delay before every retry."""

    delay_ms: int

    def __post_init__(self) -> None:
        _delay(self.delay_ms, "Fixed delay_ms")


DelayFunction = Callable[[int, BaseException], int]
"""``(attempt, exc) -> delay_ms``: ``attempt`` is the job's claim count (1 on its first run)."""

BackoffSpec = Backoff | Fixed | DelayFunction


class RetryPolicy:
    """Which failures retry and after what delay. ``retry_on``: the exception types that
    retry (default: every ``Exception``); ``dont_retry_on``: types that never do (checked
    first). :class:`Retry` and :class:`Fail` from the handler override both."""

    def __init__(self, backoff: BackoffSpec | None = None, *,
                 retry_on: tuple[type[BaseException], ...] = (Exception,),
                 dont_retry_on: tuple[type[BaseException], ...] = ()) -> None:
        self.backoff: BackoffSpec = check_backoff(Backoff() if backoff is None else backoff)
        self.retry_on = _exception_types(retry_on, "retry_on")
        self.dont_retry_on = _exception_types(dont_retry_on, "dont_retry_on")

    def plan(self, attempt: int, exc: BaseException) -> FailPlan:
        """The plan for a run that raised ``exc`` on claim number ``attempt``."""
        if isinstance(exc, Fail):
            return DEAD
        if isinstance(exc, Retry):
            if exc.delay_ms is not None:
                return FailPlan(delay_ms=exc.delay_ms)
            return self._delay(attempt, exc)
        if isinstance(exc, self.dont_retry_on) or not isinstance(exc, self.retry_on):
            return DEAD
        return self._delay(attempt, exc)

    def _delay(self, attempt: int, exc: BaseException) -> FailPlan:
        backoff = self.backoff
        if isinstance(backoff, Backoff):
            return FailPlan(base_ms=backoff.base_ms, cap_ms=backoff.cap_ms,
                            jitter=backoff.jitter)
        if isinstance(backoff, Fixed):
            return FailPlan(delay_ms=backoff.delay_ms)
        try:
            delay = backoff(attempt, exc)
            return FailPlan(delay_ms=_delay(delay, "the backoff function's delay"))
        except Exception as problem:  # noqa: BLE001 - a broken policy must not lose the job
            raise InvalidArgument(f"backoff function failed: {problem!r}") from problem


def check_backoff(backoff: Any) -> BackoffSpec:
    """``backoff`` if it is a policy (a Backoff, a Fixed or a callable); else a clear error."""
    if isinstance(backoff, (Backoff, Fixed)) or callable(backoff):
        return backoff  # type: ignore[no-any-return]
    raise InvalidArgument(
        f"backoff must be an echomq.Backoff, an echomq.Fixed or a callable (attempt, exc) "
        f"-> delay_ms, got {backoff!r}")


def _exception_types(types: Any, what: str) -> tuple[type[BaseException], ...]:
    if isinstance(types, type):
        types = (types,)
    if not isinstance(types, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise InvalidArgument(f"{what} must be a tuple of exception types, got {types!r}")
    return types


def _delay(value: Any, what: str, *, positive: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int of milliseconds, got {value!r}")
    if value < (1 if positive else 0) or value > MAX_DELAY_MS:
        low = "1" if positive else "0"
        raise InvalidArgument(f"{what} must be between {low} and {MAX_DELAY_MS} ms, "
                              f"got {value}")
    return value
