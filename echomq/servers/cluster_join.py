"""Join fresh cluster nodes into one Cluster: what ``valkey-cli --cluster create`` does,
with a MEET that is sent again when a loaded machine lost it.

A node drops a handshake that does not finish within its node timeout and never tries
again; ``valkey-cli`` then waits for the join forever (seen in CI under load). Here the
slots and config epochs are set while each node is alone, every node meets the first,
and a node that still misses some of the others meets them again every node timeout,
until every node knows every other one; then the replicas attach.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any, Protocol

import redis

from echomq.errors import ConnectionFailed
from echomq.servers.valkey import probe

SLOTS = 16384


class Joinable(Protocol):
    """What the join needs of a node: where it listens, and its cluster bus port."""

    host: str
    port: int
    bus_port: int


def join(nodes: Sequence[Joinable], primaries: int, *, node_timeout_ms: int,
         timeout_s: float) -> None:
    """Make ``nodes[:primaries]`` primaries splitting the slots evenly and the rest their
    replicas, round robin; return once every node knows all the others and every
    replica has been told its primary. ``ConnectionFailed`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    ids = prepare(nodes, primaries)
    meet_all(nodes, ids, resend_s=max(node_timeout_ms / 1000, 0.5), deadline=deadline)
    for i, node in enumerate(nodes[primaries:]):
        _ask(node, "CLUSTER", "REPLICATE", ids[i % primaries])


def prepare(nodes: Sequence[Joinable], primaries: int) -> list[str]:
    """While each node is alone: the primaries' slots, every node's own config epoch
    (no two primaries start with the same one). Returns the node ids in order."""
    ids = [_ask(node, "CLUSTER", "MYID") for node in nodes]
    for i, node in enumerate(nodes):
        if i < primaries:
            first, last = i * SLOTS // primaries, (i + 1) * SLOTS // primaries - 1
            _ask(node, "CLUSTER", "ADDSLOTSRANGE", first, last)
        _ask(node, "CLUSTER", "SET-CONFIG-EPOCH", i + 1)
    return ids


def meet_all(nodes: Sequence[Joinable], ids: list[str], *, resend_s: float,
             deadline: float) -> None:
    """Every node meets the first; until every node knows all the others, a node
    still missing some meets them again every ``resend_s`` (a node too busy to answer
    is asked again at the next round)."""
    for node in nodes[1:]:
        _meet(node, nodes[0])
    next_resend = time.monotonic() + resend_s
    while missing := {i: lost for i, node in enumerate(nodes)
                      if (lost := _unknown(node, nodes, ids)) != []}:
        now = time.monotonic()
        if now > deadline:
            raise ConnectionFailed(
                "cluster nodes did not meet in time; still unknown: "
                + "; ".join(f"to {nodes[i].port}: "
                            + (str([o.port for o in lost]) if lost is not None else "no answer")
                            for i, lost in missing.items()))
        if now > next_resend:  # a handshake dropped at its node timeout is never retried
            for i, lost in missing.items():
                for other in lost or ():
                    _meet(nodes[i], other)
            next_resend = now + resend_s
        time.sleep(0.1)


def _unknown(node: Joinable, nodes: Sequence[Joinable], ids: list[str]
             ) -> list[Joinable] | None:
    """The nodes ``node`` does not know yet as fully met ones (no handshake pending);
    None when ``node`` is too busy to answer now."""
    known = set()
    try:
        listing = _ask(node, "CLUSTER", "NODES")
    except ConnectionFailed:
        return None
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) > 2 and "handshake" not in fields[2] and "noaddr" not in fields[2]:
            known.add(fields[0])
    return [other for other, other_id in zip(nodes, ids, strict=True)
            if other_id not in known]


def _meet(node: Joinable, other: Joinable) -> None:
    """``node`` meets ``other``; a node too busy to answer now is told at the next round."""
    with contextlib.suppress(ConnectionFailed):
        _ask(node, "CLUSTER", "MEET", other.host, other.port, other.bus_port)


def _ask(node: Joinable, *command: str | int) -> str:
    client: Any = probe(node.host, node.port)  # execute_command has no type hints
    try:
        return str(client.execute_command(*command))
    except redis.RedisError as exc:
        raise ConnectionFailed(
            f"{' '.join(map(str, command))} on {node.host}:{node.port} failed: {exc}") from exc
    finally:
        client.close()
