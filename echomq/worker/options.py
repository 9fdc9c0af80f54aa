"""A Consumer's settings, checked once before anything starts: one frozen record, so a
bad keyword is a clear ``InvalidArgument`` at construction and the parts the Consumer
assembles read plain, already-checked values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from echomq.errors import InvalidArgument
from echomq.queue import validate
from echomq.queue.claim import MAX_CLAIM
from echomq.worker.beat import Recovery
from echomq.worker.context import FailurePolicy, JobContext
from echomq.worker.slots import TimeoutRules, Timeouts

DEFAULT_DURABLE_TIMEOUT_MS = 1_000
MAX_DURABLE_REPLICAS = 16

Handler = Callable[[JobContext], Any]
Hook = Callable[[list[JobContext]], None]


@dataclass(frozen=True)
class ConsumerOptions:
    """Every keyword of ``Consumer`` after its check (times as the parts use them)."""

    handler: Handler
    failure_policy: FailurePolicy | None
    concurrency: int
    threads: int
    """Handler threads: ``concurrency`` by default; fewer when handlers are coroutines
    (async tasks run on one event loop, and a thread only hands them over)."""
    lease_ms: int
    recovery: Recovery
    max_stalled: int
    beat_ms: int
    batch_size: int
    prefetch: int | None
    poll_s: float
    grace_s: float
    keep_completed: int
    result_limit: int
    durable_replicas: int
    durable_timeout_ms: int
    on_settled: Callable[[JobContext, str], None] | None
    on_held: Hook | None
    on_released: Hook | None
    rules: TimeoutRules | None
    backoff_ms: int
    backoff_cap_ms: int
    cancel: bool
    record: bool
    auto_extend: bool
    log_finished: bool


def check_options(
    handler: Handler, *, failure_policy: FailurePolicy | None, concurrency: int,
    threads: int | None, lease_ms: int, recovery: Recovery, max_stalled: int,
    beat_ms: int | None, batch_size: int, prefetch: int | None, poll_ms: int,
    shutdown_grace_ms: int, keep_completed: int, result_limit: int, durable_replicas: int,
    durable_timeout_ms: int, on_settled: Callable[[JobContext, str], None] | None,
    on_held: Hook | None, on_released: Hook | None, timeout_s: float | None,
    timeout_grace_s: float, timeouts: Timeouts | None, hard_timeout: str,
    max_abandoned: int, backoff_ms: int, backoff_cap_ms: int, cancel: bool, record: bool,
    auto_extend: bool, log_finished: bool,
) -> ConsumerOptions:
    """The Consumer's keywords checked in the order it always checked them; the first
    one that is wrong raises ``InvalidArgument`` naming it."""
    if not callable(handler):
        raise InvalidArgument(f"handler must be callable, got {handler!r}")
    if failure_policy is not None and not callable(failure_policy):
        raise InvalidArgument("failure_policy must be callable")
    concurrency = validate.positive_int(concurrency, "concurrency")
    threads = concurrency if threads is None else validate.positive_int(threads, "threads")
    lease_ms = validate.positive_int(lease_ms, "lease_ms")
    if recovery not in ("reap", "stalled"):
        raise InvalidArgument(f"recovery must be 'reap' or 'stalled', got {recovery!r}")
    max_stalled = validate.positive_int(max_stalled, "max_stalled")
    beat_ms = validate.positive_int(
        beat_ms if beat_ms is not None else max(50, lease_ms // 2), "beat_ms")
    batch_size = validate.positive_int(batch_size, "batch_size")
    if batch_size > MAX_CLAIM:
        raise InvalidArgument(f"batch_size must be at most {MAX_CLAIM}")
    if prefetch is not None:
        prefetch = validate.non_negative_int(prefetch, "prefetch")
    poll_s = validate.positive_int(poll_ms, "poll_ms") / 1000
    grace_s = validate.non_negative_int(shutdown_grace_ms, "shutdown_grace_ms") / 1000
    validate.keep_count(keep_completed, "keep_completed")
    result_limit = validate.positive_int(result_limit, "result_limit")
    durable_replicas = validate.non_negative_int(durable_replicas, "durable_replicas")
    if durable_replicas > MAX_DURABLE_REPLICAS:
        raise InvalidArgument(f"durable_replicas must be at most {MAX_DURABLE_REPLICAS}")
    durable_timeout_ms = validate.positive_int(durable_timeout_ms, "durable_timeout_ms")
    for hook, what in ((on_settled, "on_settled"), (on_held, "on_held"),
                       (on_released, "on_released")):
        if hook is not None and not callable(hook):
            raise InvalidArgument(f"{what} must be callable")
    rules = timeout_rules(timeout_s, timeout_grace_s, timeouts, hard_timeout, max_abandoned,
                          lease_ms)
    return ConsumerOptions(
        handler, failure_policy, concurrency, threads, lease_ms, recovery, max_stalled,
        beat_ms, batch_size, prefetch, poll_s, grace_s, keep_completed, result_limit,
        durable_replicas, durable_timeout_ms, on_settled, on_held, on_released, rules,
        validate.positive_int(backoff_ms, "backoff_ms"),
        validate.positive_int(backoff_cap_ms, "backoff_cap_ms"), cancel, record, auto_extend,
        log_finished)


def timeout_rules(timeout_s: float | None, grace_s: float, timeouts: Timeouts | None,
                  hard: str, max_abandoned: int, lease_ms: int) -> TimeoutRules | None:
    """The timeouts: per job (``timeouts``, an App's tasks) or one for every job."""
    if hard not in ("abandon", "exit"):
        raise InvalidArgument(f"hard_timeout must be 'abandon' or 'exit', got {hard!r}")
    validate.positive_int(max_abandoned, "max_abandoned")
    if timeouts is None and timeout_s is None:
        return None
    if timeout_s is not None:
        limits = check_timeout(timeout_s, grace_s, lease_ms)
        timeouts = timeouts or (lambda job: limits)
    if not callable(timeouts):
        raise InvalidArgument("timeouts must be callable")
    return TimeoutRules(timeouts, hard, max_abandoned)


def check_timeout(timeout_s: float, grace_s: float, lease_ms: int) -> tuple[float, float]:
    """``(timeout_s, grace_s)`` if both are usable with this lease; else a clear error.
    The grace must be shorter than the lease: a run that outlives it is settled by the
    watchdog, before its lease could lapse and another worker run it again."""
    for value, what in ((timeout_s, "timeout_s"), (grace_s, "timeout_grace_s")):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidArgument(f"{what} must be a number of seconds, got {value!r}")
    if not timeout_s > 0:
        raise InvalidArgument(f"timeout_s must be above 0, got {timeout_s}")
    if not 0 <= grace_s < lease_ms / 1000:
        raise InvalidArgument(f"timeout_grace_s must be at least 0 and below the lease "
                              f"({lease_ms / 1000:g} s), got {grace_s}")
    return float(timeout_s), float(grace_s)
