"""Cron schedules stored with their queue, each fire time enqueued exactly once.

A schedule is a field of the queue's ``schedules`` hash (name -> JSON spec); its last
fire time sits in ``schedule-fires``; every queue with schedules is a member of the
prefix's ``cron`` set, so any number of schedulers find the same schedules without a
SCAN. :func:`fire_due` computes, per schedule, the LATEST fire time that is due and not
yet fired (a scheduler that was down fires what it missed once: coalesced) and hands it
to ``cron_fire-4.lua``, which advances the last fire and adds the job in one atomic
call, refusing a time that is not after the stored last fire. So two schedulers enqueue
each fire once, and a fired job that finished and was purged is never enqueued again.
The job id is ``cron-<name>-<fire time, epoch ms>``.

Times are the SERVER clock (``TIME``) unless a caller passes ``now`` (tests, replays).
A schedule never fires for a time before it was stored (or last replaced).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from apscheduler.triggers.cron import CronTrigger

from echomq.errors import EchoMQError, InvalidArgument, InvalidKey, ScheduleGone
from echomq.models import Schedule
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.enqueue import DEFAULT_MAX_ATTEMPTS, option_args
from echomq.queue.keys import MAX_NAME_LENGTH, Keys, check_name
from echomq.queue.transitions import intake
from echomq.scheduling import crontab

log = logging.getLogger("echomq.cron")

ADD_OPTIONS = ("delay_ms", "priority", "max_attempts", "group", "name")
"""The options of ``echomq.add`` a schedule passes to every fire (not ``job_id``: each
fire's id is derived from the schedule name and the fire time)."""

JOB_ID_PREFIX = "cron-"
MAX_SCHEDULE_NAME = MAX_NAME_LENGTH - len(JOB_ID_PREFIX) - 1 - 16
"""Leaves room in a job id for ``cron-``, ``-`` and a fire time in ms."""


def fire_job_id(name: str, at_ms: int) -> str:
    """The job id of ``name``'s fire at ``at_ms``: one id per fire, whoever fires it."""
    return f"{JOB_ID_PREFIX}{name}-{at_ms}"


@dataclass(frozen=True)
class _Spec:
    """A schedule as stored: the exact JSON text is its version (cron_fire compares it)."""

    text: str
    cron: str
    timezone: str
    payload: str
    options: dict[str, Any]
    created_at: int

    @classmethod
    def load(cls, text: str) -> _Spec:
        data = json.loads(text)
        return cls(text, data["cron"], data["timezone"], data["payload"], data["options"],
                   int(data["created_at"]))

    def option_args(self) -> list[str | int]:
        o = self.options
        return option_args(o["delay_ms"], o["priority"], o["max_attempts"], o["group"],
                           o["name"])


@lru_cache(maxsize=1024)
def _trigger(cron: str, timezone: str) -> CronTrigger:
    """A stored schedule's trigger (it was validated when stored); cached per expression."""
    return crontab.parse(cron, timezone)


def check_schedule_name(name: object) -> str:
    """``name`` if a schedule may have it (a usable key part, short enough to leave room
    for the fire time in its jobs' ids), else ``InvalidKey``."""
    check_name(name, "schedule name")
    assert isinstance(name, str)
    size = len(name.encode("utf-8"))
    if size > MAX_SCHEDULE_NAME:
        raise InvalidKey(f"schedule name is {size} bytes in UTF-8; the limit is "
                         f"{MAX_SCHEDULE_NAME} (its jobs' ids add the fire time)")
    return name


def server_ms(conn: Connection) -> int:
    """The server clock in epoch ms: every scheduler agrees on it."""
    seconds, micros = conn.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _add_options(given: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(given) - set(ADD_OPTIONS))
    if unknown:
        raise InvalidArgument(
            f"schedule takes add's options {', '.join(ADD_OPTIONS)}; not {', '.join(unknown)}"
            + (" (each fire's job id is derived from the schedule name and the fire time)"
               if "job_id" in unknown else "")
        )
    options: dict[str, Any] = {"delay_ms": 0, "priority": 0,
                               "max_attempts": DEFAULT_MAX_ATTEMPTS, "group": None,
                               "name": None, **given}
    option_args(options["delay_ms"], options["priority"], options["max_attempts"],
                options["group"], options["name"])  # the gates add applies
    return options


def schedule(conn: Connection, queue: str, name: str, cron: str, payload: Any, /, *,
             timezone: str = "UTC", **add_options: Any) -> Schedule:
    """Store (or replace) the schedule ``name`` of ``queue``: every fire of ``cron`` in
    ``timezone`` enqueues ``payload`` with ``add_options`` (delay_ms, priority,
    max_attempts, group, name), once, under the id ``cron-<name>-<fire ms>``.

    ``cron`` is a crontab line (5 fields) or 6 fields with seconds first. A replaced
    schedule keeps its last fire and fires only for times from the replacement on.
    Refuses a bad name (``InvalidKey``), expression, timezone, option or payload
    (``InvalidArgument``) before anything is written. The first five arguments are
    positional, so ``name=`` is add's option (the name each fired job carries).
    """
    keys = conn.keys(queue)
    check_schedule_name(name)
    crontab.parse(cron, timezone)
    options = _add_options(add_options)
    body = validate.payload_json(payload, conn.payload_limit)
    now = server_ms(conn)
    spec = json.dumps({"cron": " ".join(cron.split()), "timezone": timezone, "payload": body,
                       "options": options, "created_at": now},
                      sort_keys=True, separators=(",", ":"))
    # the cron set first (another slot on a Cluster): a crash between the two leaves a
    # listed queue with no schedule, which the scheduler passes over, never a schedule
    # the scheduler cannot find
    conn.redis.sadd(conn.cron_set, queue)
    conn.redis.hset(keys.schedules, name, spec)
    last = cast(str | None, conn.redis.hget(keys.schedule_fires, name))
    return _view(name, _Spec.load(spec), last, now)


def unschedule(conn: Connection, queue: str, name: str) -> bool:
    """Remove the schedule ``name`` of ``queue`` (no fire of it after this returns; jobs it
    already enqueued stay). Returns whether it existed."""
    keys = conn.keys(queue)
    check_name(name, "schedule name")
    pipe = conn.redis.pipeline(transaction=True)
    pipe.hdel(keys.schedules, name)
    pipe.hdel(keys.schedule_fires, name)
    pipe.hlen(keys.schedules)
    existed, _, left = pipe.execute()
    if not left:
        _unlist(conn, queue)
    return bool(existed)


def _unlist(conn: Connection, queue: str) -> None:
    """Take a queue with no schedule left out of the cron set; a ``schedule()`` racing
    in (its HSET lands before our re-check) puts it back."""
    conn.redis.srem(conn.cron_set, queue)
    if conn.redis.hlen(conn.keys(queue).schedules):
        conn.redis.sadd(conn.cron_set, queue)


def schedules(conn: Connection, queue: str) -> list[Schedule]:
    """Every schedule of ``queue``, by name, with its next and last fire times."""
    keys = conn.keys(queue)
    specs, fires = _read(conn, keys)
    now = server_ms(conn)
    return [_view(name, _Spec.load(text), fires.get(name), now)
            for name, text in sorted(specs.items())]


def _read(conn: Connection, keys: Keys) -> tuple[dict[str, str], dict[str, str]]:
    pipe = conn.redis.pipeline(transaction=True)
    pipe.hgetall(keys.schedules)
    pipe.hgetall(keys.schedule_fires)
    specs, fires = pipe.execute()
    return specs, fires


def _view(name: str, spec: _Spec, last: str | None, now: int) -> Schedule:
    last_ms = int(last) if last else None
    start = max(now, spec.created_at, (last_ms or 0) + 1)
    return Schedule(
        name=name, cron=spec.cron, timezone=spec.timezone, payload=json.loads(spec.payload),
        options=dict(spec.options), created_at=spec.created_at,
        next_fire_at=crontab.next_fire(_trigger(spec.cron, spec.timezone), start),
        last_fire_at=last_ms,
    )


def fire_queue(conn: Connection, queue: str, now: int | None = None) -> list[str]:
    """Fire every due schedule of ``queue`` once (its latest due fire time); returns the
    ids this call enqueued. ``now``: epoch ms, default the server clock."""
    keys = conn.keys(queue)
    at_now = server_ms(conn) if now is None else validate.epoch_ms(now, "now")
    specs, fires = _read(conn, keys)
    if not specs:  # obliterated (or unscheduled by hand): stop reading it every tick
        _unlist(conn, queue)
        return []
    fired: list[str] = []
    for name, text in sorted(specs.items()):
        spec = _Spec.load(text)
        last = fires.get(name)
        at = crontab.latest_fire(_trigger(spec.cron, spec.timezone),
                                 after_ms=int(last) if last else None,
                                 since_ms=spec.created_at, now_ms=at_now)
        if at is None:
            continue
        fire = intake.CronFire(name, text, at, fire_job_id(name, at), spec.payload,
                                    spec.option_args())
        try:
            job_id = intake.cron_fired(
                conn.executor.run(*intake.cron_fire_call(keys, fire)), name)
        except ScheduleGone:  # unscheduled or replaced meanwhile: the next pass re-reads
            continue
        if job_id is not None:
            fired.append(job_id)
    return fired


def fire_due(conn: Connection, now: int | None = None) -> list[str]:
    """Fire every due schedule of every queue of the connection's prefix, once per fire
    time however many schedulers call this; returns the ids this call enqueued. ``now``:
    epoch ms, default the server clock (read once per queue)."""
    fired: list[str] = []
    for queue in sorted(cast(set[str], conn.redis.smembers(conn.cron_set))):
        try:
            fired += fire_queue(conn, queue, now)
        except (EchoMQError, ValueError, KeyError) as exc:  # one bad queue stops no other
            log.warning("cron fire of queue %r failed: %s", queue, exc)
    return fired
