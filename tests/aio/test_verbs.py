"""Issue 24: every ``aio`` verb against its sync twin: the same rows, the same errors,
bad input refused before the wire (nothing reaches the server)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

import echomq
from echomq import aio
from echomq.queue.connection import Connection
from tests.aio.conftest import Runner

TIMES = {"created_at", "claimed_at", "finished_at", "lease_epoch"}


def row(job: echomq.Job | None) -> dict[str, Any] | None:
    return None if job is None else {k: v for k, v in job.raw.items() if k not in TIMES}


def test_add_and_get_job_give_the_sync_rows(conn: Connection, arun: Runner,
                                            queue: str) -> None:
    options: list[dict[str, Any]] = [
        {}, {"priority": 5, "name": "bee"}, {"delay_ms": 60_000}, {"job_id": "fixed"},
        {"group": "g"}, {"max_attempts": 1}]
    sync_q, async_q = f"{queue}-s", f"{queue}-a"
    sync_ids = [echomq.add(conn, sync_q, {"n": i}, **o) for i, o in enumerate(options)]

    async def body(aconn: aio.AsyncConnection) -> tuple[list[str], list[Any], list[str]]:
        ids = [await aio.add(aconn, async_q, {"n": i}, **o) for i, o in enumerate(options)]
        again = await aio.add(aconn, async_q, {"n": "other"}, job_id="fixed", priority=9)
        jobs = [await aio.get_job(aconn, async_q, i) for i in ids]
        many = await aio.add_many(aconn, async_q, [{"m": 1}, 2, "three"],
                                  job_ids=["m1", "m2", "m3"], priority=2, name="many")
        return ids + [again], jobs + [await aio.get_job(aconn, async_q, "nosuch")], many

    ids, jobs, many = arun(body)
    assert ids[3:4] == ["fixed"] and ids[-1] == "fixed"
    sync_many = echomq.add_many(conn, sync_q, [{"m": 1}, 2, "three"],
                                job_ids=["m1", "m2", "m3"], priority=2, name="many")
    assert many == sync_many == ["m1", "m2", "m3"]
    for job, sync_id in zip(jobs, sync_ids, strict=False):
        sync_row = row(echomq.get_job(conn, sync_q, sync_id))
        assert sync_row is not None and job is not None
        got = row(job)
        assert got is not None
        if "fixed" not in (sync_id, job.id):
            sync_row.pop("id", None), got.pop("id", None)
        assert got == sync_row
    assert jobs[-1] is None
    for job_id in ("m1", "m2", "m3"):
        assert row(echomq.get_job(conn, async_q, job_id)) == row(
            echomq.get_job(conn, sync_q, job_id))
    assert echomq.counts(conn, async_q) == echomq.counts(conn, sync_q)


BAD: list[tuple[str, dict[str, Any]]] = [
    ("bad id", {"job_id": "a:b"}),
    ("negative delay", {"delay_ms": -1}),
    ("bool priority", {"priority": True}),
    ("zero attempts", {"max_attempts": 0}),
    ("bad group", {"group": ""}),
    ("name not str", {"name": 3}),
]


def _refusal(call: Any) -> tuple[str, str]:
    try:
        call()
    except echomq.EchoMQError as exc:
        return type(exc).__name__, str(exc)
    raise AssertionError("not refused")


@pytest.mark.parametrize(("label", "options"), BAD, ids=[b[0] for b in BAD])
def test_bad_add_options_get_the_sync_error_before_the_wire(
        conn: Connection, arun: Runner, queue: str, label: str, options: dict[str, Any]
) -> None:
    want = _refusal(lambda: echomq.add(conn, queue, {"x": 1}, **options))

    async def body(aconn: aio.AsyncConnection) -> list[tuple[str, str]]:
        async def refused(coro: Any) -> tuple[str, str]:
            try:
                await coro
            except echomq.EchoMQError as exc:
                return type(exc).__name__, str(exc)
            raise AssertionError(f"{label}: not refused")

        aconn.redis = None  # anything reaching the wire would fail otherwise
        out = [await refused(aio.add(aconn, queue, {"x": 1}, **options))]
        if "job_id" not in options:
            out.append(await refused(aio.add_many(aconn, queue, [{"x": 1}], **options)))
        return out

    got = arun(lambda aconn: _restoring(aconn, body))
    assert set(got) == {want}
    assert echomq.counts(conn, queue).pending == 0


async def _restoring(aconn: aio.AsyncConnection, body: Any) -> Any:
    client = aconn.redis
    try:
        return await body(aconn)
    finally:
        aconn.redis = client


def test_bad_payloads_names_and_ids_are_refused_before_the_wire(
        conn: Connection, arun: Runner, queue: str) -> None:
    cases = [
        ("add", (queue, {1j}), {}),
        ("add", (queue, "x" * (600 * 1024)), {}),
        ("add", ("bad:queue", 1), {}),
        ("add_many", (queue, [1, {1j}]), {}),
        ("add_many", (queue, [1, 2]), {"job_ids": ["a"]}),
        ("add_many", (queue, [1]), {"job_ids": ["a:b"]}),
        ("get_job", (queue, "a:b"), {}),
        ("cancel_request", (queue, "a:b"), {}),
        ("cancel_request", ("bad queue", "x"), {}),
        ("wait", (queue, "a:b"), {}),
        ("wait", (queue, "x"), {"timeout_s": -1}),
        ("events", (queue,), {"count": 0}),
        ("events", (queue,), {"timeout_s": float("nan")}),
        ("events", ("bad queue",), {}),
    ]
    sync = {"add": echomq.add, "add_many": echomq.add_many, "get_job": echomq.get_job,
            "cancel_request": echomq.cancel.request, "wait": echomq.wait,
            "events": echomq.events}
    wants = [_refusal(lambda v=v, a=a, k=k: sync[v](conn, *a, **k)) for v, a, k in cases]

    async def body(aconn: aio.AsyncConnection) -> list[tuple[str, str]]:
        aconn.redis = None  # anything reaching the wire would fail otherwise
        out = []
        for verb, args, kwargs in cases:
            try:
                await getattr(aio, verb)(aconn, *args, **kwargs)
            except echomq.EchoMQError as exc:
                out.append((type(exc).__name__, str(exc)))
            else:
                raise AssertionError(f"{verb}{args} not refused")
        return out

    got = arun(lambda aconn: _restoring(aconn, body))
    assert got == wants
    assert {w[0] for w in wants} >= {"InvalidArgument", "InvalidKey"}
    assert echomq.counts(conn, queue).pending == 0


def test_cancel_request_gives_the_sync_outcomes(conn: Connection, arun: Runner,
                                                queue: str) -> None:
    def sync_steps(q: str) -> None:
        echomq.add(conn, q, 3, job_id="a")
        echomq.add(conn, q, 4, job_id="done")
        held = {j.id: j for j in echomq.claim(conn, q, lease_ms=60_000, count=5)}
        echomq.complete(conn, q, "done", held["done"].token)
        echomq.add(conn, q, 1, job_id="p", group="g")
        echomq.add(conn, q, 2, job_id="s", delay_ms=60_000)

    results = {}
    targets = [("p", "stop"), ("s", None), ("a", "stop"), ("done", None), ("nosuch", None)]
    for side in ("sync", "aio"):
        q = f"{queue}-{side}"
        sync_steps(q)
        if side == "sync":
            results[side] = [_outcome(lambda t=t, r=r, q=q: echomq.cancel.request(conn, q, t, r))
                             for t, r in targets]
        else:
            async def body(aconn: aio.AsyncConnection, q: str = q) -> list[Any]:
                out = []
                for target, reason in targets:
                    try:
                        out.append(("ok", await aio.cancel_request(aconn, q, target,
                                                                   reason=reason)))
                    except echomq.EchoMQError as exc:
                        out.append((type(exc).__name__, str(exc)))
                return out

            results[side] = arun(body)
        results[side + " counts"] = echomq.counts(conn, q)
    assert results["aio"] == results["sync"]
    assert results["aio"][:3] == [("ok", "removed"), ("ok", "removed"), ("ok", "signalled")]
    assert results["aio"][3][0] == "NotCancellable" and results["aio"][4][0] == "JobGone"
    assert results["aio counts"] == results["sync counts"]


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "ok", call()
    except echomq.EchoMQError as exc:
        return type(exc).__name__, str(exc)


def test_wait_returns_a_finished_job_and_times_out_as_the_sync_one(
        conn: Connection, arun: Runner, queue: str) -> None:
    done = echomq.add(conn, queue, 1)
    [held] = echomq.claim(conn, queue, lease_ms=60_000)
    echomq.complete(conn, queue, held.id, held.token, {"r": 1})
    waiting = echomq.add(conn, queue, 2)

    async def body(aconn: aio.AsyncConnection) -> tuple[Any, Any, Any]:
        finished = await aio.wait(aconn, queue, done)
        try:
            await aio.wait(aconn, queue, waiting, timeout_s=0.3)
        except echomq.WaitTimeout as exc:
            timed_out: Any = (type(exc).__name__, str(exc))
        try:
            await aio.wait(aconn, queue, "nosuch")
        except echomq.JobGone as exc:
            gone: Any = str(exc)
        return finished, timed_out, gone

    finished, timed_out, gone = arun(body)
    assert row(finished) == row(echomq.wait(conn, queue, done))
    assert finished.state == "completed"
    assert timed_out == _refusal(lambda: echomq.wait(conn, queue, waiting, timeout_s=0.3))
    assert gone == _refusal(lambda: echomq.wait(conn, queue, "nosuch"))[1]


def test_connect_refuses_as_the_sync_connect(plain_url: str) -> None:
    import asyncio

    cases: list[tuple[Any, dict[str, Any]]] = [
        (plain_url, {"executor": "nope"}),
        (plain_url, {"prefix": "a:b"}),
        ("redis://:hunter2@127.0.0.1:1/0", {}),
        ("redis://127.0.0.1:6379/٣", {}),
        ("redis://127.0.0.1:6379/0?ssl_password=hunter2", {}),
        ("redis+sentinel://127.0.0.1:1", {}),
        (3, {}),
    ]
    for url, options in cases:
        want = _refusal(lambda u=url, o=options: echomq.connect(u, **o))

        async def attempt(u: Any = url, o: dict[str, Any] = options) -> tuple[str, str]:
            try:
                await aio.connect(u, **o)
            except echomq.EchoMQError as exc:
                return type(exc).__name__, str(exc)
            raise AssertionError("not refused")

        got = asyncio.run(attempt())
        assert "hunter2" not in got[1]
        if url == 3:
            assert got[0] == want[0] == "InvalidArgument"
        elif "127.0.0.1:1/" in str(url):
            assert got[0] == want[0] and got[1].split(":")[:2] == want[1].split(":")[:2]
        else:
            assert got == want, url


def test_import_echomq_leaves_the_aio_package_unloaded() -> None:
    code = ("import sys, redis; before = set(sys.modules); import echomq; "
            "new = set(sys.modules) - before; "
            "assert 'echomq.aio' not in sys.modules, 'aio loaded'; "
            "assert not [m for m in new if m.startswith(('redis.asyncio', 'asyncio'))], new; "
            "from echomq import aio; assert aio.add and echomq.aio is aio; "
            "assert 'redis.asyncio.cluster' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_wait_on_a_job_removed_meanwhile_raises_job_gone(conn: Connection, arun: Runner,
                                                       queue: str) -> None:
    job_id = echomq.add(conn, queue, 1)

    async def body(aconn: aio.AsyncConnection) -> str:
        waiting = asyncio.ensure_future(aio.wait(aconn, queue, job_id, timeout_s=30))
        await asyncio.sleep(0.2)
        await asyncio.to_thread(echomq.remove_job, conn, queue, job_id)
        try:
            await waiting
        except echomq.JobGone as exc:
            return str(exc)
        raise AssertionError("the wait did not notice")

    assert arun(body) == f"wait: job {job_id!r} of {queue!r} was removed before it finished"


def test_prefix_payload_limit_and_redaction_are_the_sync_connections(
        server_url: str, arun: Runner, queue: str) -> None:
    sync = echomq.connect(server_url, prefix="tnt", payload_limit=64)
    try:
        want = _refusal(lambda: echomq.add(sync, queue, "x" * 100))
        sync_id = echomq.add(sync, f"{queue}-s", {"n": 1})

        async def body(aconn: aio.AsyncConnection) -> tuple[Any, str, str]:
            try:
                await aio.add(aconn, queue, "x" * 100)
            except echomq.InvalidArgument as exc:
                refused: Any = (type(exc).__name__, str(exc))
            return refused, await aio.add(aconn, f"{queue}-a", {"n": 1}), repr(aconn)

        refused, async_id, shown = arun(body, prefix="tnt", payload_limit=64)
        assert refused == want
        assert sync.redis.exists(f"tnt:{{{queue}-a}}:job:{async_id}")
        assert sync.redis.exists(f"tnt:{{{queue}-s}}:job:{sync_id}")
        assert not sync.redis.exists(f"emq:{{{queue}-a}}:job:{async_id}")
        assert "prefix='tnt'" in shown
    finally:
        sync.close()
    secret = "redis://:hunter2@127.0.0.1:1/0"
    assert repr(aio.AsyncConnection(None, url=secret)) == (
        "AsyncConnection('redis://:***@127.0.0.1:1/0', executor='scripts', prefix='emq')")
