"""The catalogue's flows: a chain's, group's or chord's jobs added in one call
(``flow_add-2.lua``; the settle hooks that release a parent are in ``_lib_flow.lua``), and
the acknowledgement of a child on another queue (``flow_ack-1.lua``)."""

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
    parent (``policy``: "fail" or "ignore"). A node of a flow across queues has its
    ``id`` given and its links explicit: ``link`` (JSON ``[parent's queue, parent's id,
    index]``, the queue "" when the parent is on this one), ``kids`` (a parent's children's
    ids, JSON) and ``remote`` (the children on other queues, kept for a repair)."""

    name: str
    body: str
    priority: int
    max_attempts: int
    parent: int = 0
    mode: str = ""
    policy: str = ""
    id: str = ""
    link: str = ""
    kids: str = ""
    remote: str = ""

    def fields(self) -> list[str | int]:
        """The node's 11 arguments, in flow_add-2.lua's order."""
        return [self.name, self.body, self.priority, self.max_attempts, self.parent,
                self.mode, self.policy, self.id, self.link, self.kids, self.remote]


def flow_add_call(keys: Keys, nodes: Sequence[FlowNode], payload_limit: int) -> Call:
    """flow_add-2.lua: every node of one flow on one queue, in one call; each parent keeps
    ``payload_limit``, which its payload with the results spliced in may not pass."""
    args: list[str | int] = [keys.base, payload_limit]
    for node in nodes:
        args += node.fields()
    return ("flow_add", [keys.pending, keys.scheduled], args)


def flow_ack_call(keys: Keys, parent: str, child_queue: str, child: str, index: int,
                  ok: bool, result: str) -> Call:
    """flow_ack-1.lua: one outcome of a child on another queue counted on its parent."""
    return ("flow_ack", [keys.job(parent)],
            [keys.base, parent, child_queue, child, index, "1" if ok else "0", result])


def flow_added(reply: Any) -> list[str]:
    """flow_add's reply: the ids, one per node, in order."""
    return list(map(str, reply))
