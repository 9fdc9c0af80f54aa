"""Flows on one queue: a chain's, group's or chord's jobs added in one transition, and the
links read back (``children``; a job's ``parent`` is on its ``Job``). Across queues:
:mod:`echomq.queue.flows_across`.

The programming model (``echomq.chain``, ``group``, ``chord`` over task signatures) is in
:mod:`echomq.app.flows`; this is the substrate it sends through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from echomq.errors import InvalidArgument
from echomq.models import id_list
from echomq.queue.connection import Connection
from echomq.queue.transitions.flows import FlowNode, flow_add_call, flow_added

MAX_NODES = 20_000
"""The most jobs one flow adds: it is one call, which the server runs without a pause
(a chord of 10,000 children takes it about 0.2 s; ``python bench/run.py flows``)."""


def add_flow(conn: Connection, queue: str, nodes: Sequence[FlowNode]) -> list[str]:
    """Add a flow's nodes in one atomic call; their ids, in order. Each parent keeps the
    connection's ``payload_limit``: if its children's results would splice its payload
    past it, the parent is dead-lettered instead of released ("payload too large after
    its children's results"), as for a failed child."""
    if not nodes:
        raise InvalidArgument("a flow needs at least one job")
    if len(nodes) > MAX_NODES:
        raise InvalidArgument(f"a flow adds at most {MAX_NODES} jobs, got {len(nodes)}")
    for n, node in enumerate(nodes, 1):
        if not 0 <= node.parent <= len(nodes) or (node.parent and node.parent <= n):
            raise InvalidArgument(f"flow node {n}: its parent must be a later node")
    call = flow_add_call(conn.keys(queue), nodes, conn.payload_limit)
    return flow_added(conn.executor.run(*call))


def children(conn: Connection, queue: str, job_id: str) -> list[str]:
    """The ids a flow parent waits (or waited) for, in order; [] for a job that is not a
    parent, or whose row is gone."""
    text = cast(str | None, conn.redis.hget(conn.keys(queue).job(job_id), "children"))
    return id_list(text)
