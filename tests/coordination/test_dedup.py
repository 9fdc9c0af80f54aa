"""Issue 25, deduplication: ``add(..., dedup_id=, dedup_ttl_ms=, dedup_mode=)``.

Every mode with 20 producers racing on connections of their own, each path that frees an
``until_done`` hold (complete, cancel, dead, stalled dead, remove, drain, obliterate), a
``ttl`` hold lapsing on its own, debounce replacing a waiting job and leaving an active
one alone, purge freeing nothing, the gates, and the same options through ``aio`` and a
Task. Both executors; both passes (plain and Cluster).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from click.testing import CliRunner

import echomq
from echomq import aio
from echomq.cli import main
from echomq.jobs.settle import complete_cancelled
from echomq.queue.connection import Connection
from tests.support.waits import server_ms, wait_lapsed, wait_until
from tests.web.test_routes import client

LONG = 60_000
RACERS = 20


def hold(conn: Connection, queue: str, dedup_id: str) -> dict[str, str]:
    return conn.redis.hgetall(conn.keys(queue).dedup(dedup_id))  # type: ignore[no-any-return]


def jobs_in(conn: Connection, queue: str) -> int:
    counts = echomq.counts(conn, queue).as_dict()
    return sum(v for k, v in counts.items() if isinstance(v, int) and k != "paused")


def test_twenty_racing_producers_make_one_job_in_every_mode(
        server_url: str, executor: str, queue: str) -> None:
    conns = [echomq.connect(server_url, executor=executor)  # type: ignore[arg-type]
             for _ in range(RACERS)]
    try:
        for mode, ttl in (("until_done", None), ("ttl", LONG), ("debounce", None)):
            q = f"{queue}-{mode}"
            gate = threading.Barrier(RACERS)
            got: list[str] = [""] * RACERS

            def produce(n: int, mode: str = mode, ttl: int | None = ttl, q: str = q,
                        gate: threading.Barrier = gate, got: list[str] = got) -> None:
                gate.wait()
                got[n] = echomq.add(conns[n], q, {"n": n}, delay_ms=LONG, dedup_id="user-42",
                                    dedup_ttl_ms=ttl, dedup_mode=mode)  # type: ignore[arg-type]

            threads = [threading.Thread(target=produce, args=(n,)) for n in range(RACERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert len(set(got)) == 1 and got[0], (mode, got)
            assert echomq.counts(conns[0], q).scheduled == 1, mode
            job = echomq.get_job(conns[0], q, got[0])
            assert job is not None and job.dedup_id == "user-42"
            assert hold(conns[0], q, "user-42") == {"job": got[0], "mode": mode}
            if mode == "debounce":  # every add after the first replaced the payload
                assert job.debounced == RACERS - 1
            else:
                assert job.debounced == 0
    finally:
        for c in conns:
            c.close()


def test_until_done_frees_the_id_when_the_job_finishes(conn: Connection, queue: str) -> None:
    def add(payload: Any, **options: Any) -> str:
        return echomq.add(conn, queue, payload, dedup_id="d", **options)

    def freed() -> bool:  # by the finishing call itself, not by the next add
        return hold(conn, queue, "d") == {}

    def take(job_id: str) -> int:
        (held,) = echomq.claim(conn, queue, lease_ms=LONG, count=1)
        assert held.id == job_id
        return held.token

    # completed
    first = add(1)
    assert add(2) == first
    echomq.complete(conn, queue, first, take(first), "ok")
    assert freed()
    second = add(3)
    assert second != first
    # a retry holds on; dead frees
    token = take(second)
    assert echomq.fail(conn, queue, second, token, "boom", delay_ms=0) == "retrying"
    assert add(4) == second and not freed()
    echomq.promote(conn, queue, second)
    assert echomq.fail(conn, queue, second, take(second), "boom", retry=False) == "dead"
    assert freed()
    third = add(5)
    assert third not in (first, second)
    # cancelled while active (settled as cancelled), then while pending (removed)
    complete_cancelled(conn, queue, third, take(third), "stop")
    assert freed()
    fourth = add(6)
    assert echomq.cancel.request(conn, queue, fourth) == "removed"
    assert freed()
    # removed, drained
    fifth = add(7)
    echomq.remove_job(conn, queue, fifth)
    assert freed()
    sixth = add(8, delay_ms=LONG)
    assert echomq.drain(conn, queue) == 1
    assert freed()
    seventh = add(9, max_attempts=1)
    assert len({first, second, third, fourth, fifth, sixth, seventh}) == 7
    # stalled past max_stalled: dead
    (held,) = echomq.claim(conn, queue, lease_ms=30, count=1)
    wait_lapsed(conn.redis, queue, held.id)
    assert echomq.stalled_check(conn, queue, max_stalled=1).dead == [seventh]
    assert freed()
    eighth = add(10)
    assert eighth != seventh
    assert hold(conn, queue, "d") == {"job": eighth, "mode": "until_done"}
    # obliterated: the hold goes with the queue
    echomq.obliterate(conn, queue)
    assert hold(conn, queue, "d") == {}


def test_ttl_holds_past_the_finish_until_it_lapses(conn: Connection, queue: str) -> None:
    first = echomq.add(conn, queue, 1, dedup_id="t", dedup_mode="ttl", dedup_ttl_ms=400)
    (held,) = echomq.claim(conn, queue, lease_ms=LONG, count=1)
    echomq.complete(conn, queue, first, held.token, "ok")
    assert echomq.add(conn, queue, 2, dedup_id="t", dedup_mode="ttl",
                      dedup_ttl_ms=400) == first  # finished, still held
    key = conn.keys(queue).dedup("t")
    wait_until(lambda: not conn.redis.exists(key), timeout=10)
    assert echomq.add(conn, queue, 3, dedup_id="t", dedup_mode="ttl",
                      dedup_ttl_ms=400) != first
    # until_done with a TTL: the TTL bounds the hold of a job that has not finished
    waiting = echomq.add(conn, queue, 4, dedup_id="u", dedup_ttl_ms=300, delay_ms=LONG)
    wait_until(lambda: not conn.redis.exists(conn.keys(queue).dedup("u")), timeout=10)
    assert echomq.add(conn, queue, 5, dedup_id="u") != waiting


def test_debounce_replaces_a_waiting_job_and_leaves_an_active_one(
        conn: Connection, queue: str) -> None:
    def debounce(payload: Any, delay_ms: int) -> str:
        return echomq.add(conn, queue, payload, dedup_id="b", dedup_mode="debounce",
                          delay_ms=delay_ms)

    first = debounce({"v": 1}, LONG)
    before = server_ms(conn.redis)
    assert debounce({"v": 2}, 5_000) == first
    job = echomq.get_job(conn, queue, first)
    assert job is not None and job.payload == {"v": 2} and job.debounced == 1
    due = conn.redis.zscore(conn.keys(queue).scheduled, first)
    assert due is not None and before + 5_000 <= due < before + LONG
    assert debounce({"v": 3}, 0) == first  # no delay now: pending
    assert echomq.counts(conn, queue).pending == 1
    (held,) = echomq.claim(conn, queue, lease_ms=LONG, count=1)
    assert (held.id, held.payload) == (first, {"v": 3})
    # active: the add answers its id and changes nothing
    assert debounce({"v": 4}, 0) == first
    job = echomq.get_job(conn, queue, first)
    assert job is not None and job.payload == {"v": 3} and str(job.state) == "active"
    assert jobs_in(conn, queue) == 1
    echomq.complete(conn, queue, first, held.token, "ok")
    assert debounce({"v": 5}, 0) != first


def test_purge_frees_nothing_and_never_a_newer_hold(conn: Connection, queue: str) -> None:
    # ttl: the finished job's hold outlives its purged row
    old = echomq.add(conn, queue, 1, dedup_id="t", dedup_mode="ttl", dedup_ttl_ms=LONG)
    (held,) = echomq.claim(conn, queue, lease_ms=LONG, count=1)
    echomq.complete(conn, queue, old, held.token, "ok")
    assert echomq.purge(conn, queue, "completed") == 1
    assert echomq.get_job(conn, queue, old) is None
    assert echomq.add(conn, queue, 2, dedup_id="t", dedup_mode="ttl", dedup_ttl_ms=LONG) == old
    # until_done: a newer job holds the id; purging or removing the old row keeps that
    done = echomq.add(conn, queue, 3, dedup_id="u")
    (held,) = echomq.claim(conn, queue, lease_ms=LONG, count=5)
    echomq.complete(conn, queue, done, held.token, "ok")
    newer = echomq.add(conn, queue, 4, dedup_id="u", delay_ms=LONG)
    assert newer != done
    echomq.remove_job(conn, queue, done)
    assert echomq.purge(conn, queue, "completed") == 0
    assert echomq.add(conn, queue, 5, dedup_id="u") == newer
    assert hold(conn, queue, "u") == {"job": newer, "mode": "until_done"}


def test_bad_dedup_options_are_refused_before_the_wire(conn: Connection, queue: str) -> None:
    bad: list[tuple[type[Exception], dict[str, Any], str]] = [
        (echomq.InvalidKey, {"dedup_id": ""}, "must not be empty"),
        (echomq.InvalidKey, {"dedup_id": "a:b"}, "dedup id 'a:b' contains ':'"),
        (echomq.InvalidKey, {"dedup_id": "x" * 201}, "the limit is 200"),
        (echomq.InvalidKey, {"dedup_id": 7}, "dedup id must be a str"),
        (echomq.InvalidArgument, {"dedup_id": "d", "dedup_mode": "once"}, "dedup_mode must"),
        (echomq.InvalidArgument, {"dedup_id": "d", "dedup_mode": "ttl"}, "needs dedup_ttl_ms"),
        (echomq.InvalidArgument, {"dedup_id": "d", "dedup_ttl_ms": 0}, "dedup_ttl_ms must"),
        (echomq.InvalidArgument, {"dedup_id": "d", "dedup_ttl_ms": True}, "dedup_ttl_ms must"),
        (echomq.InvalidArgument, {"dedup_id": "d", "dedup_ttl_ms": 2**42}, "at most"),
        (echomq.InvalidArgument, {"dedup_ttl_ms": 5}, "need a dedup_id"),
        (echomq.InvalidArgument, {"dedup_mode": "ttl"}, "need a dedup_id"),
    ]
    for error, options, says in bad:
        with pytest.raises(error, match=says):
            echomq.add(conn, queue, 1, **options)

    async def through_aio() -> None:
        aconn = await aio.connect(conn.url)
        try:
            for error, options, says in bad:
                with pytest.raises(error, match=says):
                    await aio.add(aconn, queue, 1, **options)
        finally:
            await aconn.close()

    asyncio.run(through_aio())
    with pytest.raises(echomq.InvalidArgument, match="add_many does not deduplicate"):
        echomq.add_many(conn, queue, [1, 2], dedup_id="d")  # type: ignore[call-arg]
    assert not conn.redis.keys(conn.keys(queue).pattern)


def test_aio_a_task_and_emq_show_use_it(conn: Connection, queue: str) -> None:
    async def racing() -> list[str]:
        aconn = await aio.connect(conn.url, executor=conn.executor_name)  # type: ignore[arg-type]
        try:
            return list(await asyncio.gather(*(
                aio.add(aconn, queue, n, dedup_id="a", dedup_mode="debounce", delay_ms=LONG)
                for n in range(5))))
        finally:
            await aconn.close()

    ids = asyncio.run(racing())
    assert len(set(ids)) == 1 and echomq.counts(conn, queue).scheduled == 1
    app = echomq.App(conn=conn)

    @app.task(queue=queue, name="welcome")
    def welcome(user: str) -> str:
        return user

    sent = welcome.enqueue_with(args=("u42",), dedup_id="user-42-welcome", delay_ms=LONG)
    assert welcome.enqueue_with(args=("u42",), dedup_id="user-42-welcome") == sent

    async def again() -> str:
        try:
            return await welcome.aenqueue_with(args=("u42",), dedup_id="user-42-welcome")
        finally:
            await app.aclose()

    assert asyncio.run(again()) == sent
    shown = CliRunner().invoke(main, ["--url", conn.url, "--executor", conn.executor_name,
                                      "show", "-q", queue, sent], catch_exceptions=False)
    assert shown.exit_code == 0 and "user-42-welcome" in shown.output
    page = client(conn).get("/job", params={"queue": queue, "job": ids[0]})
    assert page.status_code == 200
    assert '<td id="job-dedup">a (4 debounced)</td>' in page.text


def test_emq_enqueue_deduplicates(conn: Connection, queue: str) -> None:
    def enqueue(*args: str) -> Any:
        return CliRunner().invoke(main, ["--url", conn.url, "--executor", conn.executor_name,
                                         "enqueue", "-q", queue, *args])

    first = enqueue('{"n": 1}', "--dedup-id", "nightly", "--dedup-mode", "ttl",
                    "--dedup-ttl", "1h")
    assert first.exit_code == 0, first.output
    again = enqueue('{"n": 2}', "--dedup-id", "nightly", "--json")
    assert again.exit_code == 0 and again.output.strip() == f'{{"ids": ["{first.output.strip()}"]}}'
    refused = enqueue("1", "2", "--dedup-id", "nightly")
    assert refused.exit_code == 2 and "one dedup id for 2 payloads" in refused.output
    refused = enqueue("1", "--dedup-mode", "ttl", "--dedup-id", "x")
    assert refused.exit_code == 1 and "needs dedup_ttl_ms" in refused.output
    assert echomq.counts(conn, queue).pending == 1
