"""The catalogue's flows: a chain's, group's or chord's jobs added in one call
(``flow_add-2.lua``; the settle hooks that release a parent are in ``_lib_flow.lua``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echomq.queue.executors import Call
from echomq.queue.keys import Keys


@dataclass(frozen=True)
class FlowNode:
    """One job of a flow, gated: ``parent`` is the 1-based index of the node that waits
    for it (0: none), ``mode`` is "" for a job pending at once, "chain" or "chord" for a
    parent (``policy``: "fail" or "ignore")."""

    name: str
    body: str
    priority: int
    max_attempts: int
    parent: int = 0
    mode: str = ""
    policy: str = ""


def flow_add_call(keys: Keys, nodes: Sequence[FlowNode]) -> Call:
    """flow_add-2.lua: every node of one flow on one queue, in one call."""
    args: list[str | int] = [keys.base]
    for node in nodes:
        args += [node.name, node.body, node.priority, node.max_attempts, node.parent,
                 node.mode, node.policy]
    return ("flow_add", [keys.pending, keys.scheduled], args)


def flow_added(reply: Any) -> list[str]:
    """flow_add's reply: the ids, one per node, in order."""
    return list(map(str, reply))
