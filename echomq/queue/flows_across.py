"""Flows across queues: a chain's or chord's jobs on several queues (different slots on a
Cluster), so no one script can touch them all.

The add (:func:`add_across`) gives every job its id up front and sends one idempotent
``flow_add`` per run of same-queue jobs, parents first: a parent exists (waiting, naming
its children) before any child could settle. A child whose parent is on another queue
does not touch it: its settle writes its outcome to its own queue's ``flow_outbox`` in
the same script, and :func:`deliver_outbox` sends each entry to ``flow_ack`` on the parent's
slot (counted at most once: the parent's ``acked`` set), then deletes it. The worker
delivers after each settle round, and its beat drains the outbox as the fallback, so a
worker killed in between still leads to exactly one release. A producer that died
between the adds leaves a waiting parent whose children are missing: :func:`repair_flow`
adds them again (idempotent: an id that exists is left alone).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import cast

from echomq.queue.connection import Connection
from echomq.queue.flows import add_flow
from echomq.queue.transitions.flows import FlowNode, flow_ack_call

BATCH = 1000
"""Acks sent in one round trip by :func:`deliver_outbox`."""


def add_across(conn: Connection, placed: Sequence[tuple[str, FlowNode]]) -> list[str]:
    """Add a flow whose jobs are on several queues; their ids, in order. ``placed`` is
    each node with its queue, linked by index as :func:`add_flow` takes them."""
    ids = [uuid.uuid4().hex for _ in placed]
    kids: list[list[int]] = [[] for _ in placed]
    for n, (_, node) in enumerate(placed):
        if node.parent:
            kids[node.parent - 1].append(n)
    given: list[FlowNode] = []
    for n, (queue, node) in enumerate(placed):
        link = ""
        if node.parent:
            at = node.parent - 1
            other = placed[at][0] if placed[at][0] != queue else ""
            link = json.dumps([other, ids[at], kids[at].index(n) + 1])
        remote = [[placed[c][0], given[c].fields()] for c in kids[n] if placed[c][0] != queue]
        given.append(replace(
            node, parent=0, id=ids[n], link=link,
            kids=json.dumps([ids[c] for c in kids[n]]) if node.mode else "",
            remote=json.dumps(remote) if remote else ""))
    # parents first: a node's parent is always a later node, so send from the end, one
    # call per run of one queue's nodes
    runs: list[tuple[str, list[FlowNode]]] = []
    for n in reversed(range(len(placed))):
        queue = placed[n][0]
        if not runs or runs[-1][0] != queue:
            runs.append((queue, []))
        runs[-1][1].append(given[n])
    for queue, nodes in runs:
        add_flow(conn, queue, nodes)
    return ids


def deliver_outbox(conn: Connection, queue: str) -> int:
    """Send each outcome in ``queue``'s outbox to its parent's ``flow_ack``, then delete
    it; how many were sent. Safe to run anywhere, any number of times (a repeated ack
    changes nothing)."""
    box = conn.keys(queue).flow_outbox
    entries = cast(dict[str, str], conn.redis.hgetall(box))
    children = list(entries)
    for start in range(0, len(children), BATCH):
        batch = children[start:start + BATCH]
        calls = []
        for child in batch:
            parent_queue, parent, index, ok, result = json.loads(entries[child])
            calls.append(flow_ack_call(conn.keys(parent_queue), parent, queue, child, index,
                                       bool(ok), result))
        replies = conn.executor.run_many(calls)  # one round trip for the batch's acks
        acked = [c for c, r in zip(batch, replies, strict=True)
                 if not isinstance(r, Exception)]
        if acked:
            conn.redis.hdel(box, *acked)
        failed = next((r for r in replies if isinstance(r, Exception)), None)
        if failed is not None:
            raise failed
    return len(entries)


def repair_flow(conn: Connection, queue: str, parent: str) -> list[str]:
    """Add again the children of a waiting ``parent`` on ``queue`` that are missing from
    their queues (a producer died between the adds); the ids added. A child acked, or
    whose outcome waits in its outbox, or whose row exists, is left alone. Run it for a
    parent older than any add takes: a child settled and forgotten (retention) in
    between the reads would run again (its ack is then a no-op)."""
    keys = conn.keys(queue)
    state, remote = cast(list[str | None],
                         conn.redis.hmget(keys.job(parent), ["state", "flow_remote"]))
    if state != "waiting" or not remote:
        return []
    acked = cast(set[str], conn.redis.smembers(keys.flow_acked(parent)))
    added = []
    for child_queue, fields in json.loads(remote):
        node = FlowNode(*fields)
        there = conn.keys(child_queue)
        if (f"{child_queue}/{node.id}" in acked or conn.redis.exists(there.job(node.id))
                or conn.redis.hexists(there.flow_outbox, node.id)):
            continue
        add_flow(conn, child_queue, [node])
        added.append(node.id)
    return added
