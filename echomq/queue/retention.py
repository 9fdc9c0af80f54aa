"""Retention: forget finished rows in Redis, never before the archive holds them.

``purge`` forgets the oldest completed or dead rows of a queue; a policy stored with the
queue (``set_retention``) says how many and how old, and ``apply_retention`` (which the
scheduler runs for every queue in the connection's ``retained_set``) applies it.

The guarantee: on a declared queue a row goes only once its outcome is folded, that is
once the row's ``entry`` (the outcome's stream id) is at or below the meta hash's
``folded`` mark, which the archive driver moves after each floor commit (fenced by its
lease, never backwards). A row that is not folded yet stays and is reported as kept for
the archive; the next purge after the next fold forgets it. On an undeclared queue, and
for a row that finished before the declaration (no ``entry``), nothing waits for the
archive and rows go freely. The check runs inside the purge's Lua, so a fold and a purge
racing can never forget an unfolded row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from echomq.errors import InvalidArgument
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.keys import check_name
from echomq.queue.transitions import removals
from echomq.records import Purged, Retention

log = logging.getLogger("echomq.retention")

STATES = ("completed", "dead")
_FIELDS = {"completed_age_ms": "retain_completed_age",
           "completed_count": "retain_completed_count",
           "dead_age_ms": "retain_dead_age", "dead_count": "retain_dead_count"}
"""Each policy limit and its field in the queue's meta hash."""


def _state(state: object) -> str:
    if state not in STATES:
        raise InvalidArgument(f"state must be 'completed' or 'dead', got {state!r}")
    return str(state)


def purge_counted(conn: Connection, queue: str, state: str, *, keep: int = 0,
                  older_than_ms: int | None = None) -> Purged:
    """``purge``, answering also how many rows stayed for the archive."""
    state = _state(state)
    validate.non_negative_int(keep, "keep")
    if older_than_ms is not None:
        validate.non_negative_int(older_than_ms, "older_than_ms")
    keys = conn.keys(queue)
    forgotten = offset = 0
    while True:
        step = removals.purged(conn.executor.run(
            *removals.purge_call(keys, state, keep, older_than_ms, offset)))
        forgotten += step.forgotten
        offset += step.passed
        if step.held or not step.more:
            return Purged(state, forgotten, step.held)


def purge(conn: Connection, queue: str, state: str, *, keep: int = 0,
          older_than_ms: int | None = None) -> int:
    """Forget finished rows of ``state`` ("completed" or "dead"), oldest first: those
    beyond the newest ``keep`` and (when given) finished more than ``older_than_ms`` ago,
    by the server clock. Both limits must hold for a row to go. On a declared queue only
    rows whose outcome the archive has folded go; the rest stay. Batched (~1,000 rows a
    call). Returns how many were forgotten."""
    return purge_counted(conn, queue, state, keep=keep, older_than_ms=older_than_ms).forgotten


def set_retention(conn: Connection, queue: str, *, completed_age_ms: int | None = None,
                  completed_count: int | None = None, dead_age_ms: int | None = None,
                  dead_count: int | None = None) -> Retention:
    """Store ``queue``'s retention policy (each None clears that limit; all None clears
    the policy). Ages are ms (>= 1), counts rows to keep (>= 0). Returns the policy."""
    policy = Retention(completed_age_ms, completed_count, dead_age_ms, dead_count)
    for name, value in policy.as_dict().items():
        if value is None:
            continue
        if name.endswith("_age_ms"):
            validate.positive_int(value, name)
        else:
            validate.non_negative_int(value, name)
    keys = conn.keys(queue)
    pipe = conn.redis.pipeline(transaction=False)
    cleared = [_FIELDS[n] for n, v in policy.as_dict().items() if v is None]
    given = {_FIELDS[n]: v for n, v in policy.as_dict().items() if v is not None}
    if cleared:
        pipe.hdel(keys.meta, *cleared)
    if given:
        pipe.hset(keys.meta, items=[x for kv in given.items() for x in kv])
        pipe.sadd(conn.retained_set, queue)
    else:
        pipe.srem(conn.retained_set, queue)
    pipe.execute()
    return policy


def retention(conn: Connection, queue: str) -> Retention:
    """``queue``'s retention policy (every limit None: none)."""
    values = conn.redis.hmget(conn.keys(queue).meta, list(_FIELDS.values()))
    return Retention(*(None if v is None else int(v) for v in values))


def retained_queues(conn: Connection) -> list[str]:
    """Every queue with a retention policy under this connection's prefix, sorted."""
    return sorted(check_name(str(n), "queue name") for n in
                  conn.redis.smembers(conn.retained_set))


@dataclass(frozen=True)
class RetentionReport:
    """What one pass of a queue's policy forgot, per state."""

    queue: str
    policy: Retention
    purged: dict[str, Purged] = field(default_factory=dict)

    @property
    def forgotten(self) -> int:
        return sum(p.forgotten for p in self.purged.values())

    @property
    def kept_for_archive(self) -> int:
        return sum(p.kept_for_archive for p in self.purged.values())

    def as_dict(self) -> dict[str, object]:
        return {"queue": self.queue, "policy": self.policy.as_dict(),
                **{s: {"forgotten": p.forgotten, "kept_for_archive": p.kept_for_archive}
                   for s, p in self.purged.items()}}


def apply_retention(conn: Connection, queue: str) -> RetentionReport:
    """Apply ``queue``'s stored policy through ``purge``: per state, the rows beyond its
    count, then the rows older than its age (a row goes when past either limit, and on a
    declared queue only once folded)."""
    policy = retention(conn, queue)
    purged: dict[str, Purged] = {}
    for state in STATES:
        age, count = policy.limits(state)
        if count is not None:
            purged[state] = purge_counted(conn, queue, state, keep=count)
        if age is not None:
            done = purge_counted(conn, queue, state, older_than_ms=age)
            purged[state] = purged[state] + done if state in purged else done
    return RetentionReport(queue, policy, purged)


def apply_all_retention(conn: Connection) -> dict[str, RetentionReport]:
    """Apply every retained queue's policy once (the scheduler's pass), queue by queue,
    each in its own calls. A listed queue with no policy (its keys deleted) is skipped:
    only ``set_retention`` takes a queue off the set, so a pass never races a new policy."""
    reports: dict[str, RetentionReport] = {}
    for queue in retained_queues(conn):
        report = apply_retention(conn, queue)
        if report.policy.empty:
            continue
        reports[queue] = report
        if report.forgotten or report.kept_for_archive:
            log.info("retention of %r: forgot %d finished row(s), %d kept for the archive",
                     queue, report.forgotten, report.kept_for_archive)
    return reports
