"""The active set is read and written by id in every claim and settle, so the claim
keeps it a skiplist (a zset under 129 members is otherwise a listpack, O(n) for each of
those) through a member too long to be a job id, added and dropped in the same call:
nobody ever sees it."""

from __future__ import annotations

from typing import Any

import echomq
from echomq.queue.connection import Connection


def test_a_small_active_set_is_a_skiplist_holding_only_the_claimed_ids(
        conn: Connection, queue: str) -> None:
    ids = echomq.add_many(conn, queue, [{"n": n} for n in range(5)])
    claimed = echomq.claim(conn, queue, 30_000, 3)
    client: Any = conn.redis
    active = conn.keys(queue).active
    assert client.object("encoding", active) in (b"skiplist", "skiplist")
    members = client.zrange(active, 0, -1)
    assert sorted(m.decode() if isinstance(m, bytes) else m for m in members) == sorted(
        j.id for j in claimed)
    assert echomq.counts(conn, queue).active == 3
    more = echomq.claim(conn, queue, 30_000, 2)  # the set exists: claimed as before
    assert {j.id for j in claimed + more} == set(ids)
    assert client.zcard(active) == 5
