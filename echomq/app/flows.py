"""Flows: jobs that wait for other jobs, over task signatures.

``task.s(*args, **kwargs)`` is a :class:`Signature` (a call not made yet). ``chain(a, b, c)``
runs them one after the other, each step's result passed to the next as its first
argument; ``group([...])`` adds many at once; ``chord([...], then=report.s())`` runs
``report`` once every child completed, with their results in order as its first argument.
Each flow on one queue is added by ONE transition (``flow_add-2.lua``): the parents are
rows in state ``waiting`` with a count of outstanding children, which the settle of each
child decrements (fenced by its token, once per child) and the last one turns pending, in
the same call (``_lib_flow.lua``). A chain or chord whose steps are on several queues is
added one queue at a time, parents first, and a child's outcome reaches a parent on
another queue through ``flow_ack`` (``queue/flows_across.py``). Everything is checked
before the wire: the signatures, their task names against the App, one queue for a
group, the arguments' JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from echomq.app.calls import call_payload
from echomq.errors import InvalidArgument
from echomq.queue import validate
from echomq.queue.flows import add_flow
from echomq.queue.flows_across import add_across
from echomq.queue.keys import check_name
from echomq.queue.transitions.flows import FlowNode

if TYPE_CHECKING:
    from echomq.app.app import App

ChildFailure = Literal["fail", "ignore"]


@dataclass(frozen=True)
class Signature:
    """One task call, not made yet: ``task.s(...)``. Frozen; :meth:`set` gives a copy with
    other options (``queue``, ``priority``, ``max_attempts``)."""

    task: str
    queue: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    def set(self, *, queue: str | None = None, priority: int | None = None,
            max_attempts: int | None = None) -> Signature:
        """This call with other options (each checked here)."""
        options = dict(self.options)
        if priority is not None:
            options["priority"] = validate.priority(priority)
        if max_attempts is not None:
            options["max_attempts"] = validate.positive_int(max_attempts, "max_attempts")
        target = self.queue if queue is None else check_name(queue, "queue name")
        return replace(self, queue=target, options=options)

    def __repr__(self) -> str:
        return f"<Signature {self.task}{self.args!r} on {self.queue!r}>"


def _node(app: App, sig: object, what: str, parent: int = 0, mode: str = "",
          policy: str = "") -> tuple[str, FlowNode]:
    """One signature as a gated flow node and its queue."""
    if not isinstance(sig, Signature):
        raise InvalidArgument(f"{what} must be a Signature (task.s(...)), got {sig!r}")
    task = app.tasks.get(sig.task)
    if task is None:
        raise InvalidArgument(f"{what}: task {sig.task!r} is not registered with this App")
    body = validate.payload_json(call_payload(sig.task, sig.args, sig.kwargs),
                                 app.conn.payload_limit)
    priority = sig.options.get("priority", task.priority)
    attempts = sig.options.get("max_attempts", task.max_attempts)
    return sig.queue, FlowNode(sig.task, body, priority, attempts, parent, mode, policy)


def _send(app: App, placed: list[tuple[str, FlowNode]], *, across: bool = True) -> list[str]:
    """One queue: the flow's one transition. Several (a chain's or chord's, ``across``):
    one idempotent add per queue, parents first (``queue/flows_across.py``)."""
    queues = sorted({q for q, _ in placed})
    if len(queues) == 1:
        return add_flow(app.conn, queues[0], [node for _, node in placed])
    if not across:
        raise InvalidArgument(
            f"a group's jobs must share one queue, got {', '.join(map(repr, queues))} "
            "(a group is added in one transition: give each signature .set(queue=...))")
    return add_across(app.conn, placed)


class chain:  # noqa: N801 - named like the call it stands for, as Celery's canvas
    """Steps run one after the other; each step's result is the next one's first
    positional argument. A step that ends dead (or cancelled) dead-letters every later
    step, naming it."""

    def __init__(self, *steps: Signature) -> None:
        if not steps:
            raise InvalidArgument("a chain needs at least one step: chain(a.s(), b.s())")
        self.steps = steps

    def enqueue(self, app: App) -> str:
        """Add every step in one transition; the LAST step's id (its result is the
        chain's), the first step pending, the others waiting."""
        n = len(self.steps)
        placed = [_node(app, sig, f"chain step {i}", parent=i + 1 if i < n else 0,
                        mode="chain" if i > 1 else "", policy="fail" if i > 1 else "")
                  for i, sig in enumerate(self.steps, 1)]
        return _send(app, placed)[-1]


class group:  # noqa: N801
    """Jobs added together, in one transition (all or none); no parent."""

    def __init__(self, sigs: Iterable[Signature]) -> None:
        if isinstance(sigs, Signature):
            raise InvalidArgument("group takes a list of signatures: group([a.s(), b.s()])")
        self.sigs = list(sigs)
        if not self.sigs:
            raise InvalidArgument("a group needs at least one signature")

    def enqueue(self, app: App) -> list[str]:
        """Add them all; their ids, in order."""
        return _send(app, [_node(app, sig, f"group job {i}")
                           for i, sig in enumerate(self.sigs, 1)], across=False)


class chord:  # noqa: N801
    """Children, then a parent: ``then`` runs once every child completed, with their
    results (a list in the children's order) as its first positional argument.
    ``on_child_failure="fail"`` (default): a child that ends dead or cancelled
    dead-letters the parent, naming it; ``"ignore"``: that child's result is None."""

    def __init__(self, sigs: Iterable[Signature], *, then: Signature,
                 on_child_failure: ChildFailure = "fail") -> None:
        if isinstance(sigs, Signature):
            raise InvalidArgument("chord takes a list of signatures: chord([a.s()], then=...)")
        self.sigs = list(sigs)
        if not self.sigs:
            raise InvalidArgument("a chord needs at least one child")
        if not isinstance(then, Signature):
            raise InvalidArgument(f"a chord's then must be a Signature (task.s(...)), "
                                  f"got {then!r}")
        if on_child_failure not in ("fail", "ignore"):
            raise InvalidArgument(f'on_child_failure must be "fail" or "ignore", '
                                  f"got {on_child_failure!r}")
        self.then = then
        self.on_child_failure = on_child_failure

    def enqueue(self, app: App) -> str:
        """Add the children and the parent in one transition; the parent's id."""
        parent = len(self.sigs) + 1
        placed = [_node(app, sig, f"chord child {i}", parent=parent)
                  for i, sig in enumerate(self.sigs, 1)]
        placed.append(_node(app, self.then, "the chord's then", mode="chord",
                            policy=self.on_child_failure))
        return _send(app, placed)[-1]
