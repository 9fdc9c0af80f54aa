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

A paused schedule (:func:`pause_schedule`) keeps its spec with a ``paused_at`` time: the
spec is the version ``cron_fire`` compares, so a fire computed before the pause is
refused, and no fire is computed while it is paused. Resumed, it never fires for the
times it missed (``resumed_at`` bounds them as ``created_at`` does). Replacing a paused
schedule keeps it paused. Specs are written by ``cron_swap`` (only over the spec read).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from apscheduler.triggers.cron import CronTrigger

from echomq.errors import EchoMQError, InvalidArgument, InvalidKey, ScheduleGone
from echomq.queue import validate
from echomq.queue.connection import Connection
from echomq.queue.enqueue import DEFAULT_MAX_ATTEMPTS, option_args
from echomq.queue.keys import MAX_NAME_LENGTH, Keys, check_name
from echomq.queue.transitions import cron_specs
from echomq.records import Schedule
from echomq.scheduling import crontab

log = logging.getLogger("echomq.cron")

ADD_OPTIONS = ("delay_ms", "priority", "max_attempts", "group", "name")
"""The options of ``echomq.add`` a schedule passes to every fire (not ``job_id``: each
fire's id is derived from the schedule name and the fire time)."""

RECENT = "recent:"
"""The schedule-fires field of a schedule's latest fire times (``recent:<name>``, written
by ``cron_fire``; a schedule name holds no ``:``)."""
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
    paused_at: int | None = None
    resumed_at: int | None = None

    @classmethod
    def load(cls, text: str) -> _Spec:
        data = json.loads(text)
        paused, resumed = data.get("paused_at"), data.get("resumed_at")
        return cls(text, data["cron"], data["timezone"], data["payload"], data["options"],
                   int(data["created_at"]), int(paused) if paused is not None else None,
                   int(resumed) if resumed is not None else None)

    @property
    def since(self) -> int:
        """It never fires for a time before this: stored, replaced or resumed."""
        return max(self.created_at, self.resumed_at or 0)

    def with_times(self, **times: int | None) -> str:
        """This spec's JSON with ``paused_at``/``resumed_at`` set (None: removed)."""
        data = json.loads(self.text)
        for name, value in times.items():
            if value is None:
                data.pop(name, None)
            else:
                data[name] = value
        return _dumps(data)

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


def _dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


SWAP_TRIES = 5
"""Writes of one spec tried against changes made meanwhile before giving up."""


def _swap(conn: Connection, keys: Keys, name: str, change: Any) -> tuple[str, str | None]:
    """Store ``change(read)`` (the spec read, None when there is none) over the spec read
    (``cron_swap``); ``(spec stored, spec read)``. Raises when others keep changing it."""
    for _ in range(SWAP_TRIES):
        read = cast(str | None, conn.redis.hget(keys.schedules, name))
        spec = change(read)
        if spec == read or cron_specs.swapped(
                conn.executor.run(*cron_specs.swap_call(keys, name, read, spec))):
            return spec, read
    raise EchoMQError(f"the cron schedule {name!r} kept changing while it was written; "
                      "try again")


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
    fresh = {"cron": " ".join(cron.split()), "timezone": timezone, "payload": body,
             "options": options, "created_at": now}

    def replaced(read: str | None) -> str:  # a paused schedule stays paused
        paused = _Spec.load(read).paused_at if read else None
        return _dumps(fresh if paused is None else {**fresh, "paused_at": paused})

    # the cron set first (another slot on a Cluster): a crash between the two leaves a
    # listed queue with no schedule, which the scheduler passes over, never a schedule
    # the scheduler cannot find
    conn.redis.sadd(conn.cron_set, queue)
    spec, _ = _swap(conn, keys, name, replaced)
    last = cast(str | None, conn.redis.hget(keys.schedule_fires, name))
    return _view(name, _Spec.load(spec), last, now)


def unschedule(conn: Connection, queue: str, name: str) -> bool:
    """Remove the schedule ``name`` of ``queue`` (no fire of it after this returns; jobs it
    already enqueued stay). Returns whether it existed."""
    keys = conn.keys(queue)
    check_name(name, "schedule name")
    pipe = conn.redis.pipeline(transaction=True)
    pipe.hdel(keys.schedules, name)
    pipe.hdel(keys.schedule_fires, name, RECENT + name)
    pipe.hlen(keys.schedules)
    existed, _, left = pipe.execute()
    if not left:
        _unlist(conn, queue)
    return bool(existed)


def pause_schedule(conn: Connection, queue: str, name: str) -> bool:
    """Pause the schedule ``name`` of ``queue``: no fire from now on until
    :func:`resume_schedule` (a fire already computed is refused by ``cron_fire``). Returns
    False when it was paused already; raises ``ScheduleGone`` when there is no such
    schedule."""
    return _pause_or_resume(conn, queue, name, pause=True)


def resume_schedule(conn: Connection, queue: str, name: str) -> bool:
    """Resume a paused schedule: it fires from its next fire time after now, never for
    the times it missed while paused. Returns False when it was not paused; raises
    ``ScheduleGone`` when there is no such schedule."""
    return _pause_or_resume(conn, queue, name, pause=False)


def _pause_or_resume(conn: Connection, queue: str, name: str, *, pause: bool) -> bool:
    keys = conn.keys(queue)
    check_name(name, "schedule name")
    now = server_ms(conn)

    def changed(read: str | None) -> str:
        if read is None:
            raise ScheduleGone(f"no cron schedule {name!r} in queue {queue!r}")
        spec = _Spec.load(read)
        if (spec.paused_at is not None) == pause:
            return read  # nothing to do: stored as it is
        return (spec.with_times(paused_at=now) if pause
                else spec.with_times(paused_at=None, resumed_at=now))

    spec, read = _swap(conn, keys, name, changed)
    return spec != read


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
    return [_view(name, _Spec.load(text), fires.get(name), now, fires.get(RECENT + name))
            for name, text in sorted(specs.items())]


def _read(conn: Connection, keys: Keys) -> tuple[dict[str, str], dict[str, str]]:
    pipe = conn.redis.pipeline(transaction=True)
    pipe.hgetall(keys.schedules)
    pipe.hgetall(keys.schedule_fires)
    specs, fires = pipe.execute()
    return specs, fires


def _view(name: str, spec: _Spec, last: str | None, now: int, recent: str | None = None
          ) -> Schedule:
    last_ms = int(last) if last else None
    start = max(now, spec.since, (last_ms or 0) + 1)
    return Schedule(
        name=name, cron=spec.cron, timezone=spec.timezone, payload=json.loads(spec.payload),
        options=dict(spec.options), created_at=spec.created_at,
        next_fire_at=None if spec.paused_at is not None
        else crontab.next_fire(_trigger(spec.cron, spec.timezone), start),
        last_fire_at=last_ms, paused_at=spec.paused_at,
        recent_fires=tuple(int(t) for t in (recent or "").split(",") if t.isdigit()),
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
        if spec.paused_at is not None:
            continue
        last = fires.get(name)
        at = crontab.latest_fire(_trigger(spec.cron, spec.timezone),
                                 after_ms=int(last) if last else None,
                                 since_ms=spec.since, now_ms=at_now)
        if at is None:
            continue
        fire = cron_specs.CronFire(name, text, at, fire_job_id(name, at), spec.payload,
                                    spec.option_args())
        try:
            job_id = cron_specs.cron_fired(
                conn.executor.run(*cron_specs.cron_fire_call(keys, fire)), name)
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
