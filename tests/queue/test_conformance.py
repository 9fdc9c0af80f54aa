"""Two executors, one transition: the same steps give the same replies and the same keys.

Every transition runs through the scripts executor on one fresh queue and through the
functions executor on another, step by step. After each step the reply (or exception)
and a dump of the queue's keyspace are recorded; the two records must be identical once
timestamps, lease deadlines and ``lease_epoch`` are normalised. ``lease_epoch`` is the
documented difference: the functions executor stamps it on claim and extend, the
scripts executor never writes it.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

import echomq
from echomq.archive import declare
from echomq.jobs.settle import Settlement
from echomq.models import ClaimedJob
from echomq.queue import listing, registry
from echomq.queue.flows import add_flow
from echomq.queue.listen import mark_listening
from echomq.queue.retention import purge_counted
from echomq.queue.transitions import cron_specs, heartbeat, intake, rates
from echomq.queue.transitions.flows import FlowNode, flow_ack_call
from echomq.scheduling.cron import fire_queue
from tests.support.keyspace import dump, epochs, normalise, timeless
from tests.support.servers import run_id
from tests.support.waits import wait_lapsed

LONG = 60_000
SHORT = 40
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
"""A fixed W3C trace context (what echomq.tracing stores on rows), so keyspaces compare."""


@dataclass
class Record:
    conn: echomq.Connection
    queue: str
    steps: list[tuple[str, Any, dict[str, Any]]] = field(default_factory=list)
    raw: list[dict[str, Any]] = field(default_factory=list)
    news: dict[str, list[str]] = field(default_factory=dict)
    """Per step, what it published on the job-events channel (heard without the mark)."""
    listening: bool = False
    named: dict[str, str] = field(default_factory=dict)
    """Ids the scenario picked, by role (for the assertions on the news)."""
    _pubsub: Any = None

    def listen(self) -> None:
        """From now on the listener mark is set (renewed before every step)."""
        self.listening = True

    def _heard(self) -> list[str]:
        """Every message published since the last step: a marker published after the step
        arrives after them (one server, one subscriber connection, in order)."""
        channel = self.conn.keys(self.queue).job_events
        if self._pubsub is None:
            self._pubsub = self.conn.redis.pubsub(ignore_subscribe_messages=True)
            self._pubsub.subscribe(channel)
            while self._pubsub.get_message(timeout=1.0) is None and not self._pubsub.subscribed:
                pass
        self.conn.redis.publish(channel, "<marker>")
        out = []
        while True:
            message = self._pubsub.get_message(timeout=5.0)
            assert message is not None, "the marker never arrived"
            if message["data"] == "<marker>":
                return out
            out.append(message["data"])

    def step(self, label: str, action: Callable[[], Any]) -> Any:
        if self._pubsub is None:
            self._heard()
        if self.listening:
            mark_listening(self.conn, self.queue)
        try:
            reply = action()
            outcome: Any = ("ok", shape(reply))
        except echomq.EchoMQError as exc:
            reply = None
            # a queue-wide refusal names the queue; the two runs use two names
            outcome = ("raised", type(exc).__name__, str(exc).replace(self.queue, "<q>"))
        snapshot = dump(self.conn.redis, self.queue)
        self.raw.append(snapshot)
        self.steps.append((label, outcome, normalise(snapshot)))
        self.news[label] = self._heard()
        return reply


def shape(reply: Any) -> Any:
    """A reply with its lease deadlines dropped (they are server times)."""
    if isinstance(reply, list):
        return [shape(item) for item in reply]
    if isinstance(reply, ClaimedJob):
        return ("claimed", reply.id, reply.token, reply.payload)
    if isinstance(reply, echomq.EchoMQError):
        return (type(reply).__name__, str(reply))
    if isinstance(reply, echomq.Job):
        times = {"created_at", "claimed_at", "finished_at", "lease_epoch"}
        return shape({k: v for k, v in reply.raw.items() if k not in times})
    if isinstance(reply, dict):  # a row: its errors and log lines carry server times
        return {k: timeless(v) if k in ("errors", "logs") else v for k, v in reply.items()}
    return reply


def searched(conn: echomq.Connection, queue: str) -> Any:
    """search_page over pending's newest ids: how many it examined, and its matches
    without their creation times (server times)."""
    ids = listing.page_ids(conn, queue, "pending", start=0, count=10)
    scanned, rows = listing.search_page(conn, queue, "pending", ids, needle='"n"', most=2,
                                        payload_chars=None)
    return [scanned, [{k: v for k, v in r.items() if k != "created_at"} for r in rows]]


def scenario(conn: echomq.Connection, queue: str) -> Record:
    rec = Record(conn, queue)
    q = queue
    s = rec.step

    # adds: plain, prioritised, delayed, with an id, idempotent, batched, one-try
    a = s("add", lambda: echomq.add(conn, q, {"n": "a"}))
    s("add priority", lambda: echomq.add(conn, q, {"n": "b"}, priority=5, name="bee"))
    delayed = s("add delayed", lambda: echomq.add(conn, q, {"n": "c"}, delay_ms=LONG))
    s("add with id", lambda: echomq.add(conn, q, {"n": "fixed"}, job_id="fixed"))
    s("idempotent add", lambda: echomq.add(conn, q, {"n": "other"}, job_id="fixed", priority=9))
    s("add_many", lambda: echomq.add_many(conn, q, [{"m": 1}, {"m": 2}, {"m": 3}]))
    s("add_many ids", lambda: echomq.add_many(conn, q, [1, 2], job_ids=["m1", "m2"], priority=2))
    s("add one try", lambda: echomq.add(conn, q, {"n": "once"}, job_id="once", max_attempts=1))

    # claim, complete, complete_many with per-job errors
    held: list[ClaimedJob] = s("claim 3", lambda: echomq.claim(conn, q, lease_ms=LONG, count=3))
    first, second, third = held
    assert first.id == a
    s("complete", lambda: echomq.complete(conn, q, first.id, first.token, {"ok": 1}))
    rec.listen()  # settles publish their news from here on
    rec.named.update(second=second.id)
    s(
        "complete_many",
        lambda: echomq.complete_many(
            conn,
            q,
            [
                Settlement(second.id, second.token, "completed", '"fine"'),
                Settlement(third.id, third.token + 1, "completed", '"stale"'),
                Settlement("nosuch", 1, "completed", '"gone"'),
                Settlement(first.id, first.token, "completed", '"again"'),
            ],
        ),
    )
    s("complete stale", lambda: echomq.complete(conn, q, third.id, third.token + 1))

    s("complete gone", lambda: echomq.complete(conn, q, "nosuch", 1))
    s("complete not active", lambda: echomq.complete(conn, q, first.id, first.token))

    # fail: retrying, its error paths, then dead
    s("fail stale", lambda: echomq.fail(conn, q, third.id, third.token + 1, "nope"))
    s("fail gone", lambda: echomq.fail(conn, q, "nosuch", 1, "nope"))
    s("fail not active", lambda: echomq.fail(conn, q, first.id, first.token, "nope"))
    s("fail retrying", lambda: echomq.fail(conn, q, third.id, third.token, "boom"))
    rest: list[ClaimedJob] = s("claim all", lambda: echomq.claim(conn, q, lease_ms=LONG, count=20))
    by_id = {job.id: job for job in rest}
    once = by_id["once"]
    s("fail dead", lambda: echomq.fail(conn, q, once.id, once.token, ValueError("bad input")))

    # remove_job in every state
    s("remove scheduled", lambda: echomq.remove_job(conn, q, delayed))
    s("remove active", lambda: echomq.remove_job(conn, q, rest[0].id))
    s("remove dead", lambda: echomq.remove_job(conn, q, once.id))
    s("remove gone", lambda: echomq.remove_job(conn, q, "nosuch"))
    s("remove retrying", lambda: echomq.remove_job(conn, q, third.id))
    late = s("add late", lambda: echomq.add(conn, q, {"n": "late"}, group="g"))
    s("remove pending grouped", lambda: echomq.remove_job(conn, q, late))

    # cancel by id, one transition: removed (pending in a lane, scheduled), signalled
    # (active: the event goes to the events channel), refused (finished), gone
    doomed = s("add to cancel", lambda: echomq.add(conn, q, {"n": "doomed"}, group="g"))
    s("cancel pending grouped", lambda: echomq.cancel.request(conn, q, doomed, "stop"))
    put_off = s("add to cancel later", lambda: echomq.add(conn, q, {"n": "off"}, delay_ms=LONG))
    s("cancel scheduled", lambda: echomq.cancel.request(conn, q, put_off))
    s("cancel active", lambda: echomq.cancel.request(conn, q, rest[0].id, "stop"))
    s("cancel completed", lambda: echomq.cancel.request(conn, q, first.id))
    s("cancel gone", lambda: echomq.cancel.request(conn, q, "nosuch"))

    # release_many with per-job errors
    keep, back = rest[0], rest[1]
    rec.named.update(keep=keep.id)
    s(
        "release_many",
        lambda: echomq.release_many(
            conn,
            q,
            [(back.id, back.token), (keep.id, keep.token + 1), ("nosuch", 1),
             (first.id, first.token)],
        ),
    )

    # extend_lock: ok, gone, stale, not active
    s("extend ok", lambda: echomq.extend_lock(conn, q, keep.id, keep.token, LONG))
    s("extend gone", lambda: echomq.extend_lock(conn, q, "nosuch", 1, LONG))
    s("extend stale", lambda: echomq.extend_lock(conn, q, keep.id, keep.token + 1, LONG))
    s("extend not active", lambda: echomq.extend_lock(conn, q, first.id, first.token, LONG))
    # progress: stored and published, fenced as extend is; a value that is no JSON refused
    s("progress ok", lambda: echomq.report_progress(conn, q, keep.id, keep.token, {"pct": 50}))
    s("progress gone", lambda: echomq.report_progress(conn, q, "nosuch", 1, 1))
    s("progress stale", lambda: echomq.report_progress(conn, q, keep.id, keep.token + 1, 2))
    s("progress not active", lambda: echomq.report_progress(conn, q, first.id, first.token, 3))
    s("progress not json", lambda: echomq.report_progress(conn, q, keep.id, keep.token, {1j}))
    # log: appended, fenced as progress is; a line that is not a str refused
    s("log ok", lambda: echomq.append_log(conn, q, keep.id, keep.token, "fetched 3 pages"))
    s("log again", lambda: echomq.append_log(conn, q, keep.id, keep.token, "caf\u00e9 / \n"))
    s("log gone", lambda: echomq.append_log(conn, q, "nosuch", 1, "x"))
    s("log stale", lambda: echomq.append_log(conn, q, keep.id, keep.token + 1, "x"))
    s("log not active", lambda: echomq.append_log(conn, q, first.id, first.token, "x"))
    s("log not text",
      lambda: echomq.append_log(conn, q, keep.id, keep.token, 3))  # type: ignore[arg-type]
    # out of range: one bound, refused before the wire by both (nothing changes)
    s("extend too long", lambda: echomq.extend_lock(conn, q, keep.id, keep.token, 10**16))
    s("claim too long", lambda: echomq.claim(conn, q, lease_ms=10**16))
    s("stalled limit too large", lambda: echomq.stalled_check(conn, q, limit=10**20))

    # reap: the released job (at the front) claimed under a short lease, lapsed, reaped
    [short] = s("claim short", lambda: echomq.claim(conn, q, lease_ms=SHORT))
    assert short.id == back.id
    wait_lapsed(conn.redis, q, short.id)
    s("reap", lambda: echomq.reap(conn, q))
    s("reap nothing", lambda: echomq.reap(conn, q))

    # stalled sweep: recovered below the threshold, dead at it
    [short] = s("claim short 2", lambda: echomq.claim(conn, q, lease_ms=SHORT))
    wait_lapsed(conn.redis, q, short.id)
    s("stalled recover", lambda: echomq.stalled_check(conn, q, max_stalled=2))
    [short] = s("claim short 3", lambda: echomq.claim(conn, q, lease_ms=SHORT))
    wait_lapsed(conn.redis, q, short.id)
    s("stalled dead", lambda: echomq.stalled_check(conn, q))
    rec.named.update(stalled=short.id)
    s("stalled nothing", lambda: echomq.stalled_check(conn, q))
    # one job twice in one batch: settled once, the second answers not active
    s(
        "complete_many twice",
        lambda: echomq.complete_many(
            conn,
            q,
            [Settlement(keep.id, keep.token, "cancelled", "cancelled:stop"),
             Settlement(keep.id, keep.token, "completed", '"again"')],
        ),
    )
    s("remove completed", lambda: echomq.remove_job(conn, q, keep.id))
    # a deterministic failure: dead at once although tries remain
    spare = next(j for j in rest[2:] if j.id != once.id)
    s("fail dead at once",
      lambda: echomq.fail(conn, q, spare.id, spare.token, "result not storable", retry=False))
    # groups and operator verbs
    s("add grouped", lambda: echomq.add(conn, q, {"g": 1}, group="g1"))
    s("set_group_limit", lambda: echomq.set_group_limit(conn, q, "g1", 2))
    # rate limits: a limited claim, one over the limit, a handler's wait handed back
    s("set_rate_limit", lambda: echomq.set_rate_limit(conn, q, 1, LONG))
    paced: list[ClaimedJob] = s("claim rate limited",
                                lambda: echomq.claim(conn, q, lease_ms=LONG, count=5))
    s("claim over the limit", lambda: echomq.claim(conn, q, lease_ms=LONG, count=5))
    s("rate_limited", lambda: [rates.rate_waited(conn.executor.run(*rates.rate_limited_call(
        conn.keys(q), j.id, j.token, 0)), j.id) for j in paced])
    s("clear_rate_limit", lambda: echomq.clear_rate_limit(conn, q))
    # the operator plane: pause, resume, promote, retry_dead, list_jobs
    s("pause", lambda: echomq.pause(conn, q))
    s("pause again", lambda: echomq.pause(conn, q))
    s("is_paused", lambda: echomq.is_paused(conn, q))
    s("claim paused", lambda: echomq.claim(conn, q, lease_ms=LONG, count=5))
    s("counts paused", lambda: echomq.counts(conn, q).as_dict())
    s("resume", lambda: echomq.resume(conn, q))
    s("resume again", lambda: echomq.resume(conn, q))
    s("add to promote", lambda: echomq.add(conn, q, {"n": "later"}, job_id="later",
                                           delay_ms=LONG, priority=3))
    s("promote", lambda: echomq.promote(conn, q, "later"))
    s("promote pending", lambda: echomq.promote(conn, q, "later"))
    s("promote gone", lambda: echomq.promote(conn, q, "nosuch"))
    s("retry_dead ids", lambda: echomq.retry_dead(conn, q, [spare.id, "nosuch", first.id]))
    s("retry_dead all", lambda: echomq.retry_dead(conn, q, limit=1))
    s("retry_dead none", lambda: echomq.retry_dead(conn, q))
    s("list pending", lambda: echomq.list_jobs(conn, q, "pending", count=3))
    s("list completed oldest", lambda: echomq.list_jobs(conn, q, "completed",
                                                        newest_first=False))
    s("search page", lambda: searched(conn, q))
    s("purge completed keep 1", lambda: echomq.purge(conn, q, "completed", keep=1))
    s("purge dead", lambda: echomq.purge(conn, q, "dead"))
    # retention on a declared queue: nothing unfolded goes, by purge or by complete's keep
    s("declare", lambda: echomq.archive.declare(conn, q))
    s("add retained", lambda: echomq.add_many(conn, q, [1, 2], job_ids=["r1", "r2"]))
    kept: list[ClaimedJob] = s("claim retained", lambda: [
        j for j in echomq.claim(conn, q, lease_ms=LONG, count=20) if j.id in ("r1", "r2")])
    s("complete retained", lambda: [echomq.complete(conn, q, j.id, j.token, "k") for j in kept])
    s("purge unfolded", lambda: purge_counted(conn, q, "completed"))
    r1 = echomq.get_job(conn, q, "r1")
    s("fold mark r1", lambda: conn.redis.hset(conn.keys(q).meta, "folded", r1 and r1.entry or ""))
    s("purge folded", lambda: purge_counted(conn, q, "completed", older_than_ms=0))
    s("add r3", lambda: echomq.add(conn, q, 3, job_id="r3"))
    [r3] = s("claim r3", lambda: [
        j for j in echomq.claim(conn, q, lease_ms=LONG, count=20) if j.id == "r3"])
    s("complete keep 0 unfolded", lambda: echomq.complete(conn, q, r3.id, r3.token, "k", keep=0))
    s("get_job", lambda: echomq.get_job(conn, q, short.id))
    s("counts", lambda: echomq.counts(conn, q))
    s("metrics", lambda: echomq.metrics(conn, q))
    # an add carrying a trace context (what echomq.tracing stores on the row)
    s("add traced", lambda: intake.added(conn.executor.run(*intake.add_call(
        conn.keys(q), [0, 0, 3, "", ""], [("traced", '{"n": "t"}')], TRACEPARENT))))
    s("get traced", lambda: echomq.get_job(conn, q, "traced"))
    # payload recording: each settle's entry carries the job's name and payload; a replay
    # is an add that names its origin
    s("declare payload", lambda: echomq.archive.declare(conn, q, payload=True))
    s("add recorded", lambda: echomq.add_many(conn, q, [{"p": 1}, {"p": [2]}, "three"],
                                               job_ids=["p1", "p2", "p3"], name="rec",
                                               max_attempts=1))
    recorded: list[ClaimedJob] = s("claim recorded", lambda: sorted(
        (j for j in echomq.claim(conn, q, lease_ms=LONG, count=50)
         if j.id in ("p1", "p2", "p3")), key=lambda j: j.id))
    s("complete recorded", lambda: echomq.complete(conn, q, "p1", recorded[0].token, "ok"))
    s("fail recorded", lambda: echomq.fail(conn, q, "p2", recorded[1].token, "bad"))
    s("cancel recorded", lambda: echomq.complete_many(conn, q, [
        Settlement("p3", recorded[2].token, "cancelled", "cancelled:stop")]))
    s("add stalling recorded", lambda: echomq.add(conn, q, {"p": 4}, job_id="p4", name="st"))
    stalling = s("claim stalling", lambda: [
        j.id for j in echomq.claim(conn, q, lease_ms=SHORT, count=50)])
    wait_lapsed(conn.redis, q, *stalling)
    s("stalled dead recorded", lambda: echomq.stalled_check(conn, q, max_stalled=1))
    replayed = s("add replay", lambda: intake.added(conn.executor.run(*intake.add_call(
        conn.keys(q), [0, 0, 3, "", "rec"], [("", '{"p":1}')], replay_of="origin/p1"))))
    s("get replay", lambda: echomq.get_job(conn, q, replayed[0]))

    # cron: a fire at a fixed (fake) time, once; a stale fire and a replaced spec refused
    s("schedule", lambda: _stable(echomq.schedule(conn, q, "tick", "*/5 * * * * *", {"c": 1},
                                                  priority=4, group="g2")))
    s("cron fire", lambda: fire_queue(conn, q, now=CRON_NOW))
    s("cron fire again", lambda: fire_queue(conn, q, now=CRON_NOW + 4_000))
    spec = conn.redis.hget(conn.keys(q).schedules, "tick")
    stale = cron_specs.CronFire("tick", spec, CRON_NOW - 5_000, "cron-tick-stale", '"s"',
                                 [0, 0, 3, "", ""])
    s("cron fire stale", lambda: _fire(conn, q, stale))
    s("cron fire replaced", lambda: _fire(conn, q, replace(stale, spec="{}", at_ms=CRON_NOW * 2)))
    s("cron fire later", lambda: fire_queue(conn, q, now=CRON_NOW + 60_000))
    s("pause schedule", lambda: echomq.pause_schedule(conn, q, "tick"))
    s("cron fire paused", lambda: fire_queue(conn, q, now=CRON_NOW + 120_000))
    s("resume schedule", lambda: echomq.resume_schedule(conn, q, "tick"))
    s("resume schedule again", lambda: echomq.resume_schedule(conn, q, "tick"))
    s("unschedule", lambda: echomq.unschedule(conn, q, "tick"))
    s("unschedule again", lambda: echomq.unschedule(conn, q, "tick"))
    dedup_steps(conn, q, s)
    flow_steps(conn, q, s)
    # a worker's heartbeat record (prefix keys, outside the queue's dump): written, removed
    me = f"w-{q}"
    s("worker beat", lambda: heartbeat.beaten(conn.executor.run(*heartbeat.beat_call(
        conn.prefix, me, LONG, {"kind": "consumer", "held": "[]"}))))
    s("worker leave", lambda: heartbeat.left(conn.executor.run(*heartbeat.leave_call(
        conn.prefix, me))))
    s("worker leave again", lambda: heartbeat.left(conn.executor.run(
        *heartbeat.leave_call(conn.prefix, me))))
    bulk_steps(conn, q, s)
    return rec


CRON_NOW = 4_102_444_800_000
"""2100-01-01T00:00:00Z: a fake `now` both runs share, so their fire ids agree."""


def _stable(found: echomq.Schedule) -> tuple[Any, ...]:
    """A stored schedule without its server times."""
    return (found.name, found.cron, found.timezone, found.payload, found.options)


def _fire(conn: echomq.Connection, q: str, fire: cron_specs.CronFire) -> str | None:
    call = cron_specs.cron_fire_call(conn.keys(q), fire)
    return cron_specs.cron_fired(conn.executor.run(*call), fire.name)


def dedup_steps(conn: echomq.Connection, q: str,
                s: Callable[[str, Callable[[], Any]], Any]) -> None:
    """add_dedup: a hold taken, answered, debounced, and freed by a settle."""
    s("add dedup", lambda: echomq.add(conn, q, {"u": 1}, job_id="u1", dedup_id="u",
                                      dedup_mode="debounce", delay_ms=LONG))
    s("add dedup again", lambda: echomq.add(conn, q, {"u": 2}, dedup_id="u",
                                            dedup_mode="debounce"))
    s("add dedup ttl", lambda: echomq.add(conn, q, {"t": 1}, job_id="t1", dedup_id="t",
                                          dedup_mode="ttl", dedup_ttl_ms=LONG))
    s("add dedup held", lambda: echomq.add(conn, q, {"t": 2}, dedup_id="t",
                                           dedup_mode="ttl", dedup_ttl_ms=LONG))
    s("remove dedup", lambda: echomq.remove_job(conn, q, "u1"))
    s("add dedup freed", lambda: echomq.add(conn, q, {"u": 3}, job_id="u2", dedup_id="u",
                                            delay_ms=LONG))


def flow_steps(conn: echomq.Connection, q: str, s: Callable[[str, Callable[[], Any]], Any]
               ) -> None:
    """A chord of two (one child dead, ignored) and a chain: added, settled, released."""
    nodes = [FlowNode("c", '{"args":[1],"kwargs":{}}', 0, 1, 3),
             FlowNode("c", '{"args":[2],"kwargs":{}}', 0, 1, 3),
             FlowNode("p", '{"args":["x"],"kwargs":{}}', 0, 1, 0, "chord", "ignore")]
    ids = s("flow_add chord", lambda: add_flow(conn, q, nodes))
    chain = s("flow_add chain", lambda: add_flow(conn, q, [
        FlowNode("a", '{"args":[],"kwargs":{}}', 0, 1, 2),
        FlowNode("b", '{"args":[],"kwargs":{}}', 0, 1, 0, "chain", "fail")]))
    # a child whose parent is on another queue (ids given): its settle fills the outbox
    s("flow_add given", lambda: add_flow(conn, q, [FlowNode(
        "x", '{"args":[],"kwargs":{}}', 0, 1, id="x1", link='["elsewhere","p1",1]')]))
    held = {j.id: j for j in s("claim children", lambda: echomq.claim(conn, q, lease_ms=LONG,
                                                                     count=50))}
    s("complete child", lambda: echomq.complete(conn, q, ids[0], held[ids[0]].token, [1]))
    s("complete across", lambda: echomq.complete(conn, q, "x1", held["x1"].token, 7))
    s("flow outbox", lambda: conn.redis.hgetall(conn.keys(q).flow_outbox))
    ack = flow_ack_call(conn.keys(q), chain[1], "elsewhere", "y1", 1, True, "7")
    s("flow_ack", lambda: conn.executor.run(*ack))
    s("flow_ack again", lambda: conn.executor.run(*ack))
    s("fail child", lambda: echomq.fail(conn, q, ids[1], held[ids[1]].token, "no", retry=False))
    s("released parent", lambda: echomq.get_job(conn, q, ids[2]))
    s("flow children", lambda: echomq.children(conn, q, ids[2]))


def bulk_steps(conn: echomq.Connection, q: str, s: Callable[[str, Callable[[], Any]], Any]
               ) -> None:
    """drain and obliterate, each refusal included, down to an empty keyspace."""
    s("add to drain", lambda: [echomq.add(conn, q, {"d": 1}, delay_ms=LONG),
                               echomq.add(conn, q, {"d": 2})])
    s("counts before drain", lambda: echomq.counts(conn, q).as_dict())
    s("drain keep scheduled", lambda: echomq.drain(conn, q, scheduled=False))
    s("drain", lambda: echomq.drain(conn, q))
    s("obliterate busy", lambda: echomq.obliterate(conn, q))
    declare(conn, q)

    def settle_active() -> list[Any]:
        ids = sorted(conn.redis.zrange(conn.keys(q).active, 0, -1))
        jobs = [echomq.get_job(conn, q, job_id) for job_id in ids]
        return [echomq.complete(conn, q, j.id, j.attempts) for j in jobs if j is not None]

    s("settle the rest, recorded", settle_active)
    s("obliterate unarchived", lambda: echomq.obliterate(conn, q))
    s("obliterate force", lambda: obliterate_counting_no_charts(conn, q))


def obliterate_counting_no_charts(conn: echomq.Connection, q: str) -> int:
    """``obliterate(force=True)``'s count of removed keys, less the charts' snapshots: they
    are named by the minute, so a run that crosses a minute holds one more of them."""
    pattern = conn.keys(q).pattern.removesuffix("*") + "chart:*"
    snapshots = sum(1 for _ in conn.redis.scan_iter(match=pattern, count=1000))
    return echomq.obliterate(conn, q, force=True) - snapshots


CALLED: set[str] = set()
"""Every transition the scenario ran, by name."""


@pytest.fixture(scope="module")
def records(server_url: str) -> Iterator[tuple[Record, Record]]:
    tag = uuid.uuid4().hex[:10]
    out = []
    for name in ("scripts", "functions"):
        conn = echomq.connect(server_url, executor=name)  # type: ignore[arg-type]
        executor = conn.executor
        original = executor._run

        def noting(t: Any, keys: Any, args: Any, original: Any = original) -> Any:
            CALLED.add(t.name)
            return original(t, keys, args)

        executor._run = noting  # type: ignore[method-assign]
        out.append(scenario(conn, f"conf-{name}-{tag}"))
    yield out[0], out[1]
    for rec in out:
        rec._pubsub.close()
        rec.conn.close()


def test_the_scenario_runs_every_transition(records: tuple[Record, Record]) -> None:
    assert set(registry.transitions()) == CALLED


def test_the_scenario_exercises_every_reply(records: tuple[Record, Record]) -> None:
    scripts, _ = records
    raised = {outcome[1] for _, outcome, _ in scripts.steps if outcome[0] == "raised"}
    assert raised == {"JobGone", "StaleToken", "NotActive", "NotRemovable", "InvalidArgument",
                      "NotScheduled", "QueueBusy", "HistoryNotArchived", "ScheduleGone",
                      "NotCancellable"}
    outcomes = dict((label, outcome) for label, outcome, _ in scripts.steps)
    assert outcomes["fail retrying"] == ("ok", "retrying")
    assert outcomes["fail dead"] == ("ok", "dead")
    assert outcomes["fail dead at once"] == ("ok", "dead")
    assert [outcomes[f"log {k}"][:2] for k in ("ok", "gone", "stale", "not active", "not text")
            ] == [("ok", None), ("raised", "JobGone"), ("raised", "StaleToken"),
                  ("raised", "NotActive"), ("raised", "InvalidArgument")]
    assert outcomes["idempotent add"] == ("ok", "fixed")
    assert outcomes["remove completed"] == outcomes["remove dead"] == ("ok", None)
    assert outcomes["remove active"][1] == "NotRemovable"
    assert [outcomes[f"cancel {k}"] for k in ("pending grouped", "scheduled", "active")] == [
        ("ok", "removed"), ("ok", "removed"), ("ok", "signalled")]
    refused = outcomes["cancel completed"]
    assert refused[1] == "NotCancellable" and refused[2].endswith(": the job is completed")
    assert outcomes["cancel gone"][1:] == ("JobGone", "cancel 'nosuch': no such job")
    assert [outcomes[k] for k in ("pause", "pause again", "is_paused", "claim paused")] == [
        ("ok", True), ("ok", False), ("ok", True), ("ok", [])]
    assert outcomes["counts paused"][1]["paused"] is True
    assert [outcomes["resume"], outcomes["resume again"]] == [("ok", True), ("ok", False)]
    assert outcomes["promote"] == ("ok", None)
    assert outcomes["promote pending"][1] == "NotScheduled"
    assert outcomes["promote gone"][1] == "JobGone"
    assert [outcomes[f"retry_dead {k}"] for k in ("ids", "all", "none")] == [
        ("ok", 1), ("ok", 1), ("ok", 0)]
    assert len(outcomes["list pending"][1]) == 3
    assert outcomes["cron fire"] == ("ok", [f"cron-tick-{CRON_NOW}"])
    assert outcomes["cron fire again"] == ("ok", [])
    assert outcomes["cron fire stale"] == ("ok", None)
    assert outcomes["cron fire later"] == ("ok", [f"cron-tick-{CRON_NOW + 60_000}"])
    assert outcomes["unschedule"] == ("ok", True) and outcomes["unschedule again"] == ("ok", False)
    assert [outcomes[k] for k in ("pause schedule", "cron fire paused", "resume schedule",
                                  "resume schedule again")] == [
        ("ok", True), ("ok", []), ("ok", True), ("ok", False)]
    assert [outcomes[f"worker {k}"] for k in ("beat", "leave", "leave again")] == [
        ("ok", None), ("ok", True), ("ok", False)]
    assert outcomes["complete_many"][1][0] is None
    assert [e[0] for e in outcomes["complete_many"][1][1:]] == [
        "StaleToken", "JobGone", "NotActive",
    ]
    assert outcomes["release_many"][1][0] is None
    assert [e[0] for e in outcomes["release_many"][1][1:]] == [
        "StaleToken", "JobGone", "NotActive",
    ]
    assert len(outcomes["reap"][1]) == 1 and outcomes["reap nothing"] == ("ok", [])
    recovered = outcomes["stalled recover"][1]
    dead = outcomes["stalled dead"][1]
    assert outcomes["complete_many twice"][1][0] is None
    assert outcomes["complete_many twice"][1][1][0] == "NotActive"
    assert len(recovered.recovered) == 1 and recovered.dead == []
    assert dead.recovered == [] and dead.dead == recovered.recovered
    # the one completed row left from before the declaration goes; r1 and r2 wait
    assert outcomes["purge unfolded"] == ("ok", echomq.Purged("completed", 1, 2))
    assert outcomes["purge folded"] == ("ok", echomq.Purged("completed", 1, 1))
    after_keep = next(keyspace for name, _, keyspace in scripts.steps
                      if name == "complete keep 0 unfolded")
    completed = [n for n in after_keep if n.startswith("job:r")]
    assert completed == ["job:r2", "job:r3"]
    before = outcomes["counts before drain"][1]
    assert before["pending"] >= 1 and before["scheduled"] >= 1 and before["active"] >= 1
    assert outcomes["drain keep scheduled"] == ("ok", before["pending"])
    assert outcomes["drain"] == ("ok", before["scheduled"])
    assert f"{before['active']} jobs are active" in outcomes["obliterate busy"][2]
    settled = outcomes["settle the rest, recorded"][1]
    assert settled == [None] * before["active"]
    unarchived = outcomes["obliterate unarchived"][2]
    assert re.search(r"holds \d+ entries the archive has not folded", unarchived)
    assert outcomes["obliterate force"][0] == "ok"
    assert outcomes["get traced"][1]["traceparent"] == TRACEPARENT


def test_both_executors_give_the_same_replies(records: tuple[Record, Record]) -> None:
    scripts, functions = records
    assert [s[0] for s in scripts.steps] == [s[0] for s in functions.steps]
    for (label, want, _), (_, got, _) in zip(scripts.steps, functions.steps, strict=True):
        assert got == want, label


def test_both_executors_publish_the_same_news(records: tuple[Record, Record]) -> None:
    scripts, functions = records
    assert scripts.news == functions.news


def test_settles_publish_only_while_someone_listens(records: tuple[Record, Record]) -> None:
    scripts, _ = records
    news = {label: [json.loads(m) for m in heard] for label, heard in scripts.news.items()}
    # before the mark: the settles and the adds publish nothing on the job channel
    assert news["complete"] == [] and news["add"] == [] and news["claim 3"] == []
    completed = news["complete_many"]
    assert completed == [{"event": "completed", "job": scripts.named["second"]}]
    keep = scripts.named["keep"]
    assert news["complete_many twice"] == [{"event": "cancelled", "job": keep}]
    assert [m["event"] for m in news["fail retrying"]] == ["failed"]
    assert news["fail retrying"][0]["reason"] == "boom"
    assert [m["event"] for m in news["fail dead"]] == ["dead"]
    assert news["fail dead"][0]["job"] == "once"
    assert news["stalled dead"] == [
        {"event": "dead", "job": scripts.named["stalled"], "reason": "stalled"}]
    assert news["stalled recover"] == []
    assert news["progress ok"] == [{"event": "progress", "job": keep, "value": {"pct": 50}}]
    for refused in ("progress gone", "progress stale", "progress not active",
                    "progress not json", "complete stale", "fail stale", "reap"):
        assert news[refused] == [], refused


def test_both_executors_leave_the_same_keyspace(records: tuple[Record, Record]) -> None:
    scripts, functions = records
    for (label, _, want), (_, _, got) in zip(scripts.steps, functions.steps, strict=True):
        assert got == want, label
    before_purge = next(snap for label, _, snap in scripts.steps if label == "set_group_limit")
    assert {"active", "dead", "completed", "job:fixed", "metrics:finished", "groups"} <= set(
        before_purge)
    final = next(snap for label, _, snap in scripts.steps if label == "metrics")
    assert "dead" not in final and "glimits" in final
    assert scripts.steps[-1][2] == {}  # obliterated: not one key left


def test_only_the_functions_executor_stamps_lease_epoch(
    records: tuple[Record, Record],
) -> None:
    scripts, functions = records
    for snapshot in scripts.raw:
        assert epochs(snapshot) == {}
    run = run_id(functions.conn.redis, functions.conn.keys(functions.queue).meta)
    # the keyspace before the bulk steps emptied it
    last = functions.raw[[label for label, _, _ in functions.steps].index("metrics")]
    claimed_rows = {
        name
        for name, (kind, content) in last.items()
        if kind == "hash" and name.startswith("job:") and int(content.get("attempts", 0)) > 0
    }
    assert claimed_rows  # the scenario claimed several jobs
    stamped = epochs(last)
    assert set(stamped) == claimed_rows
    assert set(stamped.values()) == {run}
    # and nothing else differs: the stamp is the only field the normalisation drops
    for raw_s, raw_f in zip(scripts.raw, functions.raw, strict=True):
        for name, (kind, content) in raw_f.items():
            if kind == "hash" and "lease_epoch" in content:
                assert set(content) - {"lease_epoch"} == set(raw_s[name][1])
