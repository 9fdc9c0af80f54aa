"""Queue names spread over a Cluster's primaries, so a test of something that spans
queues shows it reaches every node (on one server: just fresh names)."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import echomq


def primary_of(conn: echomq.Connection, queue: str) -> str:
    """The name of the node holding ``queue``'s slot ("" on one server)."""
    if not conn.cluster:
        return ""
    client: Any = conn.redis
    return str(client.get_node_from_key(conn.keys(queue).meta).name)


def spread_queues(conn: echomq.Connection, count: int) -> list[str]:
    """``count`` fresh queue names; on a Cluster chosen so that the primaries hold
    ``count // primaries`` of them each, give or take one (names are drawn until every
    node has its share: random names would miss a node now and then)."""
    tag = uuid.uuid4().hex[:8]
    candidates = (f"spread-{tag}-{i}" for i in itertools.count())
    if not conn.cluster:
        return list(itertools.islice(candidates, count))
    client: Any = conn.redis
    primaries = sorted(node.name for node in client.get_primaries())
    share = {node: count // len(primaries) + (i < count % len(primaries))
             for i, node in enumerate(primaries)}
    names: list[str] = []
    for name in candidates:
        node = primary_of(conn, name)
        if share[node] > 0:
            share[node] -= 1
            names.append(name)
            if len(names) == count:
                return names
    raise AssertionError("unreachable: the candidates never end")
