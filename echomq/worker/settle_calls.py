"""What one of the settler's round trips sends: a batch of finished runs as one
``complete`` call per queue with completions (cancellations included) and one ``fail``
call per failure, built through the catalogue; and the grouping by queue the settler
reads the replies back in."""

from __future__ import annotations

import random

from echomq.queue.executors import Call
from echomq.queue.transitions import rates, settles
from echomq.queue.transitions.settles import Settled
from echomq.worker.context import FailPlan, HandlerOutcome
from echomq.worker.queues import QueuePlan


def settle_calls(plan: QueuePlan, groups: list[tuple[str, list[HandlerOutcome]]],
                 fails: list[HandlerOutcome], *, record: bool, keep_completed: int,
                 backoff_ms: int, backoff_cap_ms: int) -> list[Call]:
    """One complete call per queue with completions (``groups``: the completions as
    :func:`complete_groups` orders them), then one fail call per failure."""
    calls: list[Call] = []
    for queue, outcomes in groups:
        # plain tuples in a Settlement's order (attempts is the token): a Settlement's
        # __new__ is a Python call, ~0.3 us a job
        settlements: list[tuple[str, int, Settled, str]] = [
            (o.job.id, o.job.attempts, "cancelled" if o.kind == "cancelled" else "completed",
             o.text) for o in outcomes]
        calls.append(settles.complete_call(plan.by_name[queue], settlements, record,
                                           keep_completed))
    for o in fails:
        calls.append(fail_call(plan, o, record=record, backoff_ms=backoff_ms,
                               backoff_cap_ms=backoff_cap_ms))
    return calls


def by_queue(batch: list[HandlerOutcome]) -> list[list[HandlerOutcome]]:
    """The batch split by queue, in the order each queue first appears."""
    groups: dict[str, list[HandlerOutcome]] = {}
    for o in batch:
        groups.setdefault(o.job.queue, []).append(o)
    return list(groups.values())


def complete_groups(completes: list[HandlerOutcome]
                    ) -> list[tuple[str, list[HandlerOutcome]]]:
    """The completions by queue: one complete call (and one reply) each."""
    groups: dict[str, list[HandlerOutcome]] = {}
    for o in completes:
        groups.setdefault(o.job.queue, []).append(o)
    return list(groups.items())


def fail_call(plan: QueuePlan, o: HandlerOutcome, *, record: bool, backoff_ms: int,
              backoff_cap_ms: int) -> Call:
    """The fail call of one failed run, by its ``FailPlan`` (a rejected one: dead now)."""
    fp = o.plan or FailPlan(dead=o.kind == "rejected")
    return settles.fail_call(
        plan.by_name[o.job.queue], o.job.id, o.job.token, o.text,
        backoff_ms=fp.base_ms or backoff_ms,
        backoff_cap_ms=fp.cap_ms or backoff_cap_ms, record=record,
        retry=not fp.dead, delay_ms=fp.delay_ms,
        jitter=random.random() if fp.jitter and fp.delay_ms is None else None,  # noqa: S311 - spreads retries, no secret
        error_entry=o.error)


def limited_calls(plan: QueuePlan, limited: list[HandlerOutcome]) -> list[Call]:
    """One rate_limited call per run that raised ``RateLimited``: handed back uncounted,
    its queue (or group) waiting the plan's ``delay_ms``."""
    return [rates.rate_limited_call(plan.by_name[o.job.queue], o.job.id, o.job.token,
                                    (o.plan.delay_ms if o.plan else None) or 0)
            for o in limited]
