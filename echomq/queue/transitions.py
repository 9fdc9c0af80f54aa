"""The catalogue of a job's transitions: each one's call beside the parser of its reply.

A call builder returns the ``Call`` an executor runs (the transition's name, its
KEYS and ARGV in the order its ``.lua`` header lists them); the parser next to it
reads that transition's reply. The verbs (``claim``, ``complete``, ``fail``, ...),
the Consumer, its settler and beat, the sweep, the operator's verbs and the archive's
fold lease (whose scripts live in ``echomq/archive/lua/``) all build and read through
here, so a transition's wire shape is written once. Error codes map through the one
reply table (:mod:`echomq.queue.replies`); what a success code means is said here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from echomq.errors import (
    EchoMQError,
    HistoryNotArchived,
    InvalidArgument,
    JobGone,
    NotActive,
    StaleToken,
)
from echomq.models import StalledSweep
from echomq.queue import validate
from echomq.queue.events import Event, EventKind
from echomq.queue.executors import Call
from echomq.queue.keys import Keys, check_name
from echomq.queue.replies import CODES, codes_of, raise_for_code, raise_for_reply

LEASE_LOST = (StaleToken, NotActive, JobGone)
"""The errors that mean a held job's lease is no longer this holder's."""

Settled = Literal["completed", "cancelled"]
"""How ``complete`` settles a job: a cancelled job is a completion too."""

FailVerdict = Literal["retrying", "dead"]
_FAIL_VERDICTS: dict[int, FailVerdict] = {1: "retrying", 2: "dead"}
"""fail-3.lua's success codes."""


class Settlement(NamedTuple):
    """One job to settle in a batch: its id, token, how it settles and its result text.

    Immutable like the frozen dataclass it was, and built for every job a Consumer
    settles: a tuple costs ~0.35 us to make, a frozen dataclass ~1.3 us."""

    job_id: str
    token: int
    outcome: Settled
    result: str


def per_job_errors(verb: str, job_ids: Sequence[str], codes: Sequence[Any]
                   ) -> list[EchoMQError | None]:
    """A batch transition's codes as None (done) or the error each job met."""
    out: list[EchoMQError | None] = []
    for job_id, code in zip(job_ids, codes, strict=True):
        error = CODES.get(int(code))
        out.append(error(f"{verb} {job_id!r}: {error.__name__}") if error else None)
    return out


# -- add ----------------------------------------------------------------------------


def add_call(keys: Keys, options: Sequence[str | int], jobs: Sequence[tuple[str, str]],
             traceparent: str = "", replay_of: str = "") -> Call:
    """add-2.lua: enqueue ``(id or "", payload JSON)`` pairs with the same options; its
    reply is one id per job (an existing id for an idempotent add). ``traceparent``
    (tracing on) is kept on each new row for the handler's span; ``replay_of``
    (``"<queue>/<id>"``, archive.replay) names the archived job the new ones replay."""
    if replay_of and any(ord(c) < 32 for c in replay_of):
        raise InvalidArgument(f"replay_of must be printable, got {replay_of!r}")
    args: list[str | int] = [keys.base, *options, traceparent, replay_of]
    for job_id, body in jobs:
        args += [job_id, body]
    return ("add", [keys.pending, keys.scheduled], args)


def added(reply: Any) -> list[str]:
    """add's reply: the ids, in the call's order."""
    return list(map(str, reply))


# -- cron_fire ----------------------------------------------------------------------


@dataclass(frozen=True)
class CronFire:
    """One fire of one schedule: what cron_fire-4.lua needs to enqueue it exactly once."""

    name: str
    spec: str
    """The stored spec JSON the fire was computed from (the script refuses another)."""
    at_ms: int
    job_id: str
    payload: str
    options: Sequence[str | int]
    """add's options, in add_call's order: delay_ms, priority, max_attempts, group, name."""


def cron_fire_call(keys: Keys, fire: CronFire) -> Call:
    """cron_fire-4.lua: advance the schedule's last fire to ``fire.at_ms`` and add its job,
    in one call; refused when that time is not after the stored last fire."""
    keys.job(fire.job_id)  # the gate, before the wire
    validate.epoch_ms(fire.at_ms, "fire time")
    return ("cron_fire", [keys.pending, keys.scheduled, keys.schedules, keys.schedule_fires],
            [keys.base, fire.name, fire.spec, fire.at_ms, fire.job_id, fire.payload,
             *fire.options])


def cron_fired(reply: Any, name: str) -> str | None:
    """cron_fire's reply: the job id when this call fired, None when the time was fired
    already (by another scheduler); raises ``ScheduleGone`` when the spec changed."""
    if isinstance(reply, str):
        return reply
    raise_for_reply("cron_fire", int(reply), name)
    return None


# -- claim --------------------------------------------------------------------------


def claim_call(keys: Keys, lease_ms: int, count: int) -> Call:
    """claim-3.lua: promote due scheduled jobs, then take up to ``count`` under one lease."""
    return ("claim", [keys.pending, keys.scheduled, keys.active], [keys.base, lease_ms, count])


def claimed(flat: Sequence[Any]) -> list[tuple[str, int, str, str]]:
    """claim's flat reply (the lease deadline, then id, token, payload, name per job) as
    ``(id, token, raw payload, name)``; the payload stays JSON text, a job with no name
    has ``""``."""
    return [(flat[i], int(flat[i + 1]), flat[i + 2], flat[i + 3])
            for i in range(1, len(flat), 4)]


# -- complete -----------------------------------------------------------------------


def complete_call(keys: Keys, settlements: Sequence[Settlement], record: bool,
                  keep: int = -1) -> Call:
    """complete-2.lua for a batch; its reply is one code per job (``per_job_errors``)."""
    args: list[str | int] = [keys.base, "1" if record else "0",
                             validate.keep_count(keep, "keep")]
    for s in settlements:
        keys.job(s.job_id)  # the gate, before the wire
        args += [s.job_id, s.token, s.outcome, s.result]
    return ("complete", [keys.active, keys.completed], args)


def completed(job_ids: Sequence[str], reply: Any) -> list[EchoMQError | None]:
    """complete's reply, per job in the call's order: None (settled) or the error it met."""
    return per_job_errors("complete", job_ids, reply)


# -- fail ---------------------------------------------------------------------------


def fail_call(
    keys: Keys, job_id: str, token: int, error: str, *, backoff_ms: int, backoff_cap_ms: int,
    record: bool = False, retry: bool = True, delay_ms: int | None = None,
    jitter: float | None = None, error_entry: str | None = None,
) -> Call:
    """fail-3.lua for one job: retry after a backoff, or dead-letter (``retry=False``: at once).

    ``delay_ms`` schedules the retry that long from now instead of the backoff; ``jitter``
    (r in [0, 1], drawn here on the host) makes the backoff ``floor(backoff * r)``, full
    jitter; ``error_entry`` (a JSON object, see ``texts.attempt_error``) is appended to the
    row's ``errors`` with the server's time and the attempt.
    """
    keys.job(job_id)  # the gate, before the wire
    delay = "" if delay_ms is None else validate.non_negative_int(delay_ms, "delay_ms")
    if jitter is None:
        spread = ""
    elif (isinstance(jitter, bool) or not isinstance(jitter, int | float)
          or not 0 <= jitter <= 1):
        raise InvalidArgument(f"jitter must be a number in [0, 1], got {jitter!r}")
    else:
        spread = repr(float(jitter))
    entry = "" if error_entry is None else _error_entry(error_entry)
    return ("fail", [keys.active, keys.scheduled, keys.dead],
            [keys.base, job_id, token, error, backoff_ms, backoff_cap_ms,
             "1" if record else "0", "0" if retry else "1", delay, spread, entry])


def _error_entry(text: str) -> str:
    """An attempt's error entry, checked to be a JSON object before the wire."""
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise InvalidArgument("error_entry must be the text of a JSON object")
    return text


def failed(reply: Any, job_id: str) -> FailVerdict | BaseException:
    """fail's reply: the verdict, or the error the job met (never raises)."""
    if isinstance(reply, BaseException):
        return reply
    code = int(reply)
    verdict = _FAIL_VERDICTS.get(code)
    if verdict is not None:
        return verdict
    error = CODES.get(code)
    if error is None:
        return EchoMQError(f"fail {job_id!r}: unknown reply {code}")
    return error(f"fail {job_id!r}: {error.__name__}")


# -- extend_lock --------------------------------------------------------------------


def extend_call(keys: Keys, job_id: str, token: int, lease_ms: int) -> Call:
    """extend_lock-2.lua: re-score a held job's lease to server TIME + ``lease_ms``."""
    return ("extend_lock", [keys.active, keys.job(job_id)], [job_id, token, lease_ms])


def extended(reply: Any, job_id: str) -> BaseException | None:
    """extend_lock's reply: None (renewed) or the error met (``LEASE_LOST`` when the
    lease is no longer the holder's); never raises."""
    if isinstance(reply, BaseException):
        return reply
    error = CODES.get(int(reply))
    return error(f"extend_lock {job_id!r}: {error.__name__}") if error else None


# -- progress -----------------------------------------------------------------------


def progress_call(keys: Keys, job_id: str, token: int, value: str, message: str) -> Call:
    """progress-2.lua: store a held job's progress (JSON text) and publish ``message`` on
    the job-events channel, fenced by the token and membership in active."""
    return ("progress", [keys.active, keys.job(job_id)],
            [job_id, token, value, keys.job_events, message])


def progressed(reply: Any, job_id: str) -> None:
    """progress's reply: return when stored; raise ``JobGone``, ``StaleToken`` or
    ``NotActive`` (``LEASE_LOST``: the holder lost the job)."""
    raise_for_code(int(reply), job_id, "progress")


# -- log ----------------------------------------------------------------------------


def log_call(keys: Keys, job_id: str, token: int, text: str) -> Call:
    """log-2.lua: append one line to a held job's ``logs``, fenced by the token and
    membership in active (the last 100 lines and 64 KiB kept)."""
    return ("log", [keys.active, keys.job(job_id)], [job_id, token, text])


def logged(reply: Any, job_id: str) -> None:
    """log's reply: return when appended; raise ``JobGone``, ``StaleToken`` or
    ``NotActive`` (``LEASE_LOST``: the holder lost the job)."""
    raise_for_code(int(reply), job_id, "log")


# -- reap, release, remove_job, stalled_check ---------------------------------------


REAP_BATCH = 1000


def reap_call(keys: Keys, batch: int = REAP_BATCH) -> Call:
    """reap-2.lua: up to ``batch`` lapsed leases back to pending; its reply is their ids."""
    return ("reap", [keys.active, keys.pending], [keys.base, batch])


def release_call(keys: Keys, held: Sequence[tuple[str, int]]) -> Call:
    """release-1.lua: hand ``(id, token)`` pairs back to the front of pending; one code per job."""
    args: list[str | int] = [keys.base]
    for job_id, token in held:
        keys.job(job_id)  # the gate, before the wire
        args += [job_id, token]
    return ("release", [keys.active], args)


def released(held: Sequence[tuple[str, int]], reply: Any) -> list[EchoMQError | None]:
    """release's reply, per job: None (handed back) or the error it met."""
    return per_job_errors("release", [job_id for job_id, _ in held], reply)


def remove_call(keys: Keys, job_id: str) -> Call:
    """remove_job-5.lua: delete a job no worker holds (pending, scheduled, completed, dead)."""
    return ("remove_job",
            [keys.pending, keys.scheduled, keys.completed, keys.dead, keys.job(job_id)],
            [keys.base, job_id])


def removed(reply: Any, job_id: str) -> None:
    """remove_job's reply: return when removed; raise ``NotRemovable`` or ``JobGone``."""
    raise_for_code(int(reply), job_id, "remove_job")


def stalled_call(keys: Keys, max_stalled: int, limit: int) -> Call:
    """stalled_check-3.lua: one count-thresholded sweep over at most ``limit`` lapses."""
    return ("stalled_check", [keys.active, keys.pending, keys.dead],
            [keys.base, max_stalled, limit])


def swept(reply: Any) -> StalledSweep:
    """stalled_check's reply: the ids recovered and the ids dead-lettered."""
    recovered, dead = reply
    return StalledSweep(recovered=list(recovered), dead=list(dead))


# -- cancel -------------------------------------------------------------------------

CancelOutcome = Literal["removed", "signalled"]
_CANCEL_OUTCOMES: dict[int, CancelOutcome] = {1: "removed", 2: "signalled"}
"""cancel-3.lua's success codes."""


def cancel_call(keys: Keys, job_id: str, reason: str | None) -> Call:
    """cancel-3.lua: read the job's state and act on it in the same call: remove a pending
    or scheduled job, publish the ``cancel`` event (``reason`` in it) for an active one."""
    message = Event(EventKind.CANCEL, job_id, reason).encode()
    return ("cancel", [keys.pending, keys.scheduled, keys.job(job_id)],
            [keys.base, job_id, message])


def cancelled(reply: Any, job_id: str) -> CancelOutcome:
    """cancel's reply ``{code, state}``: ``"removed"`` or ``"signalled"``; raise ``JobGone``
    (no row) or ``NotCancellable`` (naming the state it found)."""
    code, state = int(reply[0]), str(reply[1])
    outcome = _CANCEL_OUTCOMES.get(code)
    if outcome is not None:
        return outcome
    error = CODES.get(code)
    if error is None:
        raise EchoMQError(f"cancel {job_id!r}: unknown reply {code}")
    if error is JobGone:
        raise JobGone(f"cancel {job_id!r}: no such job")
    raise error(f"cancel {job_id!r}: the job is {state}")


# -- the operator's transitions: pause, resume, promote, group_limit, retry_dead ----


def pause_call(keys: Keys) -> Call:
    """pause-1.lua: set the queue's ``paused`` flag; claim hands out nothing while set."""
    return ("pause", [keys.meta], [keys.base])


def resume_call(keys: Keys) -> Call:
    """resume-1.lua: clear the ``paused`` flag and wake idle Consumers."""
    return ("resume", [keys.meta], [keys.base])


def toggled(reply: Any) -> bool:
    """pause's or resume's reply: True when the flag changed, False when it already was."""
    return int(reply) == 1


def promote_call(keys: Keys, job_id: str) -> Call:
    """promote-3.lua: a scheduled job becomes pending now."""
    return ("promote", [keys.scheduled, keys.pending, keys.job(job_id)], [keys.base, job_id])


def promoted(reply: Any, job_id: str) -> None:
    """promote's reply: return when promoted; raise ``JobGone`` or ``NotScheduled``."""
    raise_for_code(int(reply), job_id, "promote")


def group_limit_call(keys: Keys, group: str, limit: int) -> Call:
    """group_limit-1.lua: how many jobs of ``group`` may be active at once; the ring
    follows the new limit in the same call. Its reply is always 1."""
    return ("group_limit", [keys.glimits],
            [keys.base, check_name(group, "group"), validate.positive_int(limit, "limit")])


RETRY_BATCH = 1000
"""The most dead jobs one retry_dead call moves (the Python verb loops)."""


def retry_dead_call(keys: Keys, job_ids: Sequence[str] | None, count: int) -> Call:
    """retry_dead-1.lua: the given dead ids (at most ``RETRY_BATCH``), or with
    ``job_ids=None`` the ``count`` oldest of the dead set, back to pending."""
    if job_ids is None:
        return ("retry_dead", [keys.dead], [keys.base, "oldest", count])
    for job_id in job_ids:
        keys.job(job_id)  # the gate, before the wire
    return ("retry_dead", [keys.dead], [keys.base, "ids", len(job_ids), *job_ids])


def retried(reply: Any) -> tuple[int, int]:
    """retry_dead's reply: (how many moved to pending, how many ids the call looked at)."""
    moved, scanned = reply
    return int(moved), int(scanned)
# -- purge (retention) --------------------------------------------------------------

PURGE_BATCH = 1000
"""Rows one purge call examines at most (the ~1,000-key bound of one Lua call)."""


@dataclass(frozen=True)
class PurgeStep:
    """One purge call's answer: rows forgotten, candidates passed over (the next call's
    offset grows by them), whether candidates remain, and how many candidates stay
    because the archive has not folded them (>0: the purge stops)."""

    forgotten: int
    passed: int
    more: bool
    held: int


def purge_call(keys: Keys, state: str, keep: int, older_than_ms: int | None, offset: int,
               batch: int = PURGE_BATCH) -> Call:
    """purge-2.lua: forget up to ``batch`` of the oldest finished rows of ``state``
    ("completed" or "dead") beyond the newest ``keep`` and finished before ``older_than_ms``
    ago (None: any age), skipping the first ``offset`` candidates; on a declared queue
    only rows whose outcome the archive has folded."""
    state_key = keys.completed if state == "completed" else keys.dead
    age = -1 if older_than_ms is None else older_than_ms
    return ("purge", [state_key, keys.meta], [keys.base, keep, batch, age, offset])


def purged(reply: Any) -> PurgeStep:
    """purge's reply ``{forgotten, passed, more, held}``."""
    forgotten, passed, more, held = (int(x) for x in reply)
    return PurgeStep(forgotten, passed, more == 1, held)


# -- drain, obliterate --------------------------------------------------------------


BULK_BATCH = 1000
"""The most one drain or obliterate call deletes: jobs (each a row and its set entry, plus
the lanes visited) for drain, keys for obliterate. The verbs loop."""

DRAIN_START, DRAIN_DONE = "pending", "done"


def drain_call(keys: Keys, position: str, scheduled: bool, batch: int = BULK_BATCH) -> Call:
    """drain-2.lua: one batch of pending (then lane, then scheduled) jobs from ``position``."""
    return ("drain", [keys.pending, keys.scheduled],
            [keys.base, validate.positive_int(batch, "batch"), position,
             "1" if scheduled else "0"])


def drained(reply: Any) -> tuple[int, str]:
    """drain's reply: how many jobs the call removed, and where the next call goes on
    (``DRAIN_DONE``: nothing is left)."""
    removed, position = reply
    return int(removed), str(position)


def obliterate_begin_call(keys: Keys, force: bool) -> Call:
    """obliterate_begin-3.lua: check the queue may go (unless ``force``), then mark it."""
    return ("obliterate_begin", [keys.meta, keys.active, keys.completions],
            ["1" if force else "0"])


def obliterate_begun(reply: Any, queue: str) -> None:
    """obliterate_begin's reply: return when marked; raise ``QueueBusy`` (jobs active) or
    ``HistoryNotArchived`` (declared entries not yet archived), naming how many."""
    code, count = (int(part) for part in reply)
    error = codes_of("obliterate_begin").get(code)
    if error is None:
        return
    if issubclass(error, HistoryNotArchived):
        raise error(f"obliterate {queue!r}: its declared outcome stream still holds {count} "
                    "entries the archive has not folded and trimmed; fold them first "
                    "(emq archive fold), or force to lose them")
    raise error(f"obliterate {queue!r}: {count} jobs are active; wait until they settle, "
                "or force (their workers' settles then find no job)")


def obliterate_keys_call(keys: Keys, batch: Sequence[str]) -> Call:
    """obliterate_keys-1.lua: delete ``batch`` (keys under the queue's base) of a marked queue."""
    if len(batch) > BULK_BATCH:
        raise InvalidArgument(f"at most {BULK_BATCH} keys per call, got {len(batch)}")
    return ("obliterate_keys", [keys.meta], [keys.base, *batch])


def obliterated_keys(reply: Any, queue: str) -> int:
    """obliterate_keys' reply: how many keys went; ``QueueBusy`` when the queue is no
    longer marked (another obliterate ended it)."""
    return raise_for_reply("obliterate_keys", int(reply), queue)


def obliterate_end_call(keys: Keys) -> Call:
    """obliterate_end-1.lua: delete the meta hash, the queue's last key, and its marks."""
    return ("obliterate_end", [keys.meta], [])


def obliterate_ended(reply: Any, queue: str) -> int:
    """obliterate_end's reply: 1 when the meta hash held settings, 0 when only the marks;
    ``QueueBusy`` when not marked."""
    return raise_for_reply("obliterate_end", int(reply), queue)


# -- the archive's fold lease (script-only: echomq/archive/lua/fold_*.lua) ----------


def fold_acquire_call(keys: Keys, token: str, lease_ms: int) -> Call:
    """fold_acquire-1.lua: take the queue's fold lease for ``lease_ms``, or renew our own."""
    return ("fold_acquire", [keys.archive_lease], [token, lease_ms])


def fold_renew_call(keys: Keys, token: str, lease_ms: int) -> Call:
    """fold_renew-1.lua: extend the lease only while it is ours."""
    return ("fold_renew", [keys.archive_lease], [token, lease_ms])


def fold_release_call(keys: Keys, token: str) -> Call:
    """fold_release-1.lua: let the lease go only while it is ours."""
    return ("fold_release", [keys.archive_lease], [token])


def fold_trim_call(keys: Keys, token: str, minid: str, lease_ms: int, archive: str,
                   also: str, claim: bool) -> Call:
    """fold_trim-3.lua: ``XTRIM MINID`` fenced by the lease and the archive of record."""
    return ("fold_trim", [keys.archive_lease, keys.completions, keys.meta],
            [token, minid, lease_ms, archive, also, "1" if claim else "0"])


def fold_mark_call(keys: Keys, token: str, checkpoint: str, archive: str, also: str,
                   claim: bool) -> Call:
    """fold_mark-2.lua: move the ``folded`` mark, fenced as :func:`fold_trim_call` is."""
    return ("fold_mark", [keys.archive_lease, keys.meta],
            [token, checkpoint, archive, also, "1" if claim else "0"])


def fold_answered(transition: str, reply: Any, queue: str) -> int:
    """A fold-lease script's reply: its success code (1, or 0 for a release or a mark that
    changed nothing, or the entries a trim removed), else the error its code means for
    ``queue`` (``LeaseHeld``, ``LeaseLost``, ``NotDeclared``, ``NotArchiveOfRecord``)."""
    return raise_for_reply(transition, int(reply), queue)
