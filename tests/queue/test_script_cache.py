"""The script cache and the functions library come and go; the caller never notices.

A SCRIPT FLUSH, a server restart, a deleted or stale library: each happens between two
calls of one connection, and the second call answers as if nothing had happened.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

import echomq
from echomq.queue import registry
from echomq.servers.valkey import EmbeddedValkey

LONG = 60_000


@pytest.fixture
def admin(private_server: EmbeddedValkey) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(private_server.url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def private_conn(private_server: EmbeddedValkey, executor: str) -> Iterator[echomq.Connection]:
    conn = echomq.connect(private_server.url, executor=executor)  # type: ignore[arg-type]
    yield conn
    conn.close()


def library_code(client: redis.Redis) -> str | None:
    for lib in client.function_list(library=registry.LIBRARY_NAME, withcode=True):
        entry = dict(zip(lib[::2], lib[1::2], strict=True))
        if entry["library_name"] == registry.LIBRARY_NAME:
            return str(entry["library_code"])
    return None


def round_trip(conn: echomq.Connection, queue: str) -> None:
    """A whole life: add, claim, extend, complete; each answer checked."""
    job_id = echomq.add(conn, queue, {"n": 1})
    [held] = echomq.claim(conn, queue, lease_ms=LONG)
    assert held.id == job_id
    echomq.extend_lock(conn, queue, job_id, held.token, LONG)
    echomq.complete(conn, queue, job_id, held.token, "done")
    job = echomq.get_job(conn, queue, job_id)
    assert job is not None and (job.state, job.result) == ("completed", "done")


def test_script_flush_between_calls_changes_nothing(
    private_server: EmbeddedValkey, admin: redis.Redis, queue: str
) -> None:
    conn = echomq.connect(private_server.url, executor="scripts")
    try:
        job_id = echomq.add(conn, queue, {"n": 1})
        add_sha = registry.transitions()["add"].sha
        claim_sha = registry.transitions()["claim"].sha
        assert admin.script_exists(add_sha) == [True]
        admin.script_flush()
        assert admin.script_exists(add_sha, claim_sha) == [False, False]
        [held] = echomq.claim(conn, queue, lease_ms=LONG)
        assert (held.id, held.token) == (job_id, 1)
        assert admin.script_exists(claim_sha) == [True]  # reloaded on NOSCRIPT
        for _ in range(3):
            admin.script_flush()
            echomq.extend_lock(conn, queue, job_id, held.token, LONG)
        admin.script_flush()
        with pytest.raises(echomq.StaleToken):  # error replies survive the reload path too
            echomq.complete(conn, queue, job_id, held.token + 1)
        admin.script_flush()
        round_trip(conn, queue)
    finally:
        conn.close()


def test_a_restart_between_calls_changes_nothing(
    private_server: EmbeddedValkey, private_conn: echomq.Connection, admin: redis.Redis,
    queue: str,
) -> None:
    job_id = echomq.add(private_conn, queue, {"n": 1})
    [held] = echomq.claim(private_conn, queue, lease_ms=LONG)
    run_before = admin.info("server")["run_id"]
    private_server.restart()
    assert admin.info("server")["run_id"] != run_before
    # AOF kept the data; the scripts are gone and come back on NOSCRIPT
    assert admin.script_exists(registry.transitions()["extend_lock"].sha) == [False]
    echomq.extend_lock(private_conn, queue, job_id, held.token, LONG)
    echomq.complete(private_conn, queue, job_id, held.token, "after")
    private_server.restart(hard=True)
    round_trip(private_conn, queue)


def test_the_functions_library_survives_a_restart_with_aof(
    private_server: EmbeddedValkey, admin: redis.Redis, queue: str
) -> None:
    conn = echomq.connect(private_server.url, executor="functions")
    try:
        echomq.add(conn, queue, {"n": 1})
        code = library_code(admin)
        assert code == registry.library()[0]
        private_server.restart()
        assert library_code(admin) == code  # persisted, not reloaded
        fresh = echomq.connect(private_server.url, executor="functions")
        round_trip(fresh, queue + "b")
        fresh.close()
        round_trip(conn, queue + "c")
        assert echomq.counts(conn, queue).pending == 1  # the job added before the restart
    finally:
        conn.close()


def test_a_deleted_library_is_reloaded(
    private_server: EmbeddedValkey, admin: redis.Redis, queue: str
) -> None:
    conn = echomq.connect(private_server.url, executor="functions")
    try:
        job_id = echomq.add(conn, queue, {"n": 1})
        admin.function_delete(registry.LIBRARY_NAME)
        assert library_code(admin) is None
        [held] = echomq.claim(conn, queue, lease_ms=LONG)
        assert held.id == job_id
        assert library_code(admin) == registry.library()[0]
        admin.function_flush()
        echomq.complete(conn, queue, job_id, held.token)
        admin.function_delete(registry.LIBRARY_NAME)
        with pytest.raises(echomq.NotActive):  # error codes after a reload, too
            echomq.extend_lock(conn, queue, job_id, held.token, LONG)
        assert echomq.get_job(conn, queue, job_id).state == "completed"  # type: ignore[union-attr]
    finally:
        conn.close()


STALE_LIBRARIES = {
    "versioned": (
        "#!lua name=echomq\n"
        "redis.register_function{function_name='emq_version', "
        "callback=function() return 'an-older-version' end, flags={'no-writes'}}\n"
        "redis.register_function('emq_add', function(keys, args) return {'not-an-id'} end)\n"
    ),
    "unversioned": (
        "#!lua name=echomq\n"
        "redis.register_function('emq_claim', function(keys, args) return {} end)\n"
    ),
}


@pytest.mark.parametrize("stale", sorted(STALE_LIBRARIES))
def test_a_stale_library_is_replaced_by_the_version_check(
    private_server: EmbeddedValkey, admin: redis.Redis, queue: str, stale: str
) -> None:
    admin.function_load(STALE_LIBRARIES[stale])
    assert library_code(admin) == STALE_LIBRARIES[stale]
    conn = echomq.connect(private_server.url, executor="functions")
    try:
        job_id = echomq.add(conn, queue, {"n": 1})
        assert job_id != "not-an-id"
        [held] = echomq.claim(conn, queue, lease_ms=LONG)
        assert held.id == job_id
        assert library_code(admin) == registry.library()[0]
        assert admin.fcall("emq_version", 0) == registry.library()[1]
    finally:
        conn.close()


def test_a_library_swapped_under_a_checked_connection_is_reloaded_when_missing(
    private_server: EmbeddedValkey, admin: redis.Redis, queue: str
) -> None:
    conn = echomq.connect(private_server.url, executor="functions")
    try:
        echomq.add(conn, queue, {"n": 1})
        # another client replaces the library with one lacking the transitions
        admin.function_load(STALE_LIBRARIES["unversioned"].replace("emq_claim", "emq_other"),
                            replace=True)
        [held] = echomq.claim(conn, queue, lease_ms=LONG)
        assert held.token == 1
        assert library_code(admin) == registry.library()[0]
    finally:
        conn.close()


def test_both_executors_share_one_server_without_interfering(
    private_server: EmbeddedValkey, queue: str
) -> None:
    scripts = echomq.connect(private_server.url, executor="scripts")
    functions = scripts.with_executor("functions")
    try:
        job_id = echomq.add(scripts, queue, {"n": 1})
        [held] = echomq.claim(functions, queue, lease_ms=LONG)
        echomq.extend_lock(scripts, queue, job_id, held.token, LONG)
        echomq.complete(functions, queue, job_id, held.token)
        assert echomq.counts(scripts, queue).completed == 1
    finally:
        scripts.close()


def test_a_consumer_s_batch_refused_by_an_empty_cache_loads_only_its_own_scripts(
    private_server: EmbeddedValkey, admin: redis.Redis, queue: str
) -> None:
    """The settler's pipeline meets NOSCRIPT on a fresh cache: it loads the scripts it
    sent, not every transition's (one round trip each, to every primary on a Cluster:
    long enough to outlive the short lease of a job that failed at once)."""
    from tests.support.consumers import ConsumerThreads
    from tests.support.waits import wait_until

    conn = echomq.connect(private_server.url, executor="scripts")
    threads = ConsumerThreads(conn, queue, poll_ms=20)
    try:
        job_id = echomq.add(conn, queue, {"n": 1}, max_attempts=1)
        admin.script_flush()
        consumer = threads.start(lambda job: 1 / 0, lease_ms=200, beat_ms=50,
                                 recovery="stalled", concurrency=1, prefetch=0)
        wait_until(lambda: consumer.failed == 1)
        job = echomq.get_job(conn, queue, job_id)
        assert job is not None and job.state == "dead"
        assert "ZeroDivisionError" in (job.last_error or "")
    finally:
        threads.stop_all()
        conn.close()
    shas = {name: t.sha for name, t in registry.transitions().items()}
    unused = ["drain", "obliterate_keys", "purge", "retry_dead", "cron_fire"]
    assert admin.script_exists(*(shas[n] for n in unused)) == [False] * len(unused)
    assert admin.script_exists(shas["fail"]) == [True]


def test_each_scripts_sha_is_its_text_hashed_once() -> None:
    """Every call names its script by sha: the ~15 KB script (``_lib.lua`` + the body) is
    hashed once per process, not on every call, and the name is the text's SHA1."""
    import hashlib

    for t in registry.transitions().values():
        first = t.sha
        assert t.sha is first
        assert first == hashlib.sha1(t.script.encode()).hexdigest()
