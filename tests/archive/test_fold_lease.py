"""The fold lease: its scripts' headers and reply codes, and how it fences renew and release."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from echomq.archive.fold_lease import FoldLease
from echomq.errors import LeaseHeld, LeaseLost
from echomq.queue import registry
from echomq.queue.connection import Connection
from echomq.queue.replies import SCRIPT_CODES
from echomq.queue.transitions import folding


def test_every_script_has_a_header_and_every_code_a_mapping() -> None:
    folder = resources.files("echomq.archive") / "lua"
    files = sorted(p.name for p in folder.iterdir() if p.name.endswith(".lua")
                   and not p.name.startswith("_"))
    scripts = registry.scripts(registry.ARCHIVE_PACKAGE)
    assert [f"{t.name}-{t.numkeys}.lua" for t in scripts.values()] == files
    assert set(scripts) == {n for n in SCRIPT_CODES if n.startswith("fold_")}
    for name, script in scripts.items():
        source = script.body
        assert source.startswith(f"--[[ {name}:") and "KEYS[1]" in source
        assert "Replies:" in source
        returned = {int(v) for v in re.findall(r"return (-?\d+)\b", source)}
        successes = {1} | ({0} if name in ("fold_release", "fold_mark") else set())
        missing = returned - successes - set(SCRIPT_CODES[name])
        assert not missing, f"{name} returns {missing} without a mapping"
        documented = {int(v) for v in re.findall(r"^\s+(-?\d+)\s", source, re.M)}
        assert set(SCRIPT_CODES[name]) <= documented


def test_the_lease_fences_renew_and_release(rconn: Connection, queue: str) -> None:
    first = FoldLease(rconn, queue, 10_000).acquire()
    second = FoldLease(rconn, queue, 10_000)
    try:
        second.acquire()
        raise AssertionError("a held lease was taken")
    except LeaseHeld:
        pass
    try:
        second.renew()
        raise AssertionError("a lease not ours was renewed")
    except LeaseLost:
        pass
    assert second.release() is False
    first.renew()
    assert first.release() is True
    assert second.acquire() is second


def test_the_lease_runs_on_either_executor_alone_or_in_a_batch(conn: Connection,
                                                               queue: str) -> None:
    # its scripts are the archive's but its calls the catalogue's: both executors run
    # them (by EVALSHA), under the connection's keys, one call or several in one trip
    keys = conn.keys(queue)
    lease = FoldLease(conn, queue, 10_000).acquire()
    assert conn.redis.get(keys.archive_lease) == lease.token
    calls = [folding.fold_renew_call(keys, lease.token, 10_000),
             folding.fold_acquire_call(keys, "another", 10_000),
             folding.fold_renew_call(keys, "another", 10_000)]
    assert conn.executor.run_many(calls) == [1, 0, -1]
    with pytest.raises(LeaseHeld, match=repr(queue)):
        folding.fold_answered("fold_acquire", conn.executor.run(*calls[1]), queue)
    assert lease.release() is True
