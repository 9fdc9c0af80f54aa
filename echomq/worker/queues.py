"""Which queues a worker serves, and in what order each claim round asks them.

``["high", "mail", "default"]`` is strict priority: every round asks ``high`` first and a
lower queue only for the slots the ones above it could not fill. Weights
(``"high:5,low:1"`` or ``["high:5", "low:1"]``) share claims instead: each round starts
at the queue a smooth weighted round robin picks, so under a backlog on every queue
about 5 of 6 claim rounds (and so of jobs) go to ``high``; the others still fill what
the first one leaves.
"""

from __future__ import annotations

from collections.abc import Sequence

from echomq.errors import InvalidArgument, InvalidKey
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys

MAX_WEIGHT = 1000

QueueSpec = str | Sequence[str]
"""A queue name, ``"a,b"`` or ``"a:5,b:1"``, or a list of names or ``name:weight`` items."""


def parse_queues(spec: QueueSpec) -> list[tuple[str, int | None]]:
    """``(name, weight)`` pairs in the given order (weight None when not given); a clear
    error for an empty spec, a repeated queue, a bad weight, or weights on only some."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    if not items:
        raise InvalidArgument("queues must name at least one queue")
    parsed: list[tuple[str, int | None]] = []
    for item in items:
        if not isinstance(item, str):
            raise InvalidArgument(f"a queue must be a name (str), got {item!r}")
        name, colon, weight = item.strip().partition(":")
        if not name:
            raise InvalidArgument(f"empty queue name in {spec!r}")
        parsed.append((name, _weight(weight, item) if colon else None))
    names = [name for name, _ in parsed]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidArgument(f"queue {repeated[0]!r} is named twice in {spec!r}")
    weighted = [w is not None for _, w in parsed]
    if any(weighted) and not all(weighted):
        raise InvalidArgument(f"give every queue a weight or none: {spec!r} (strict "
                              "priority is 'a,b,c'; shares are 'a:5,b:1')")
    return parsed


def _weight(text: str, item: str) -> int:
    try:
        weight = int(text)
    except ValueError:
        raise InvalidKey(f"queue {item!r}: ':' is not allowed in a queue name (a weight "
                         "is 'name:5', a whole number)") from None
    if not 1 <= weight <= MAX_WEIGHT:
        raise InvalidArgument(f"queue weight must be between 1 and {MAX_WEIGHT} in {item!r}")
    return weight


class QueuePlan:
    """The queues of one worker, their keys, and the order of the next claim round."""

    def __init__(self, conn: Connection, spec: QueueSpec) -> None:
        parsed = parse_queues(spec)
        self.names = [name for name, _ in parsed]
        self.keys = [conn.keys(name) for name in self.names]  # every name gated here
        self.by_name = dict(zip(self.names, self.keys, strict=True))
        weights = [w for _, w in parsed]
        self.weights: list[int] | None = (
            None if weights[0] is None else [w or 1 for w in weights])
        self._current = [0] * len(self.names)

    @property
    def weighted(self) -> bool:
        return self.weights is not None

    def describe(self) -> str:
        """For log lines: ``a, b`` (strict order) or ``a:5, b:1``."""
        if self.weights is None:
            return ", ".join(self.names)
        return ", ".join(f"{n}:{w}" for n, w in zip(self.names, self.weights, strict=True))

    def round(self) -> list[Keys]:
        """The queues to ask, in order, for one claim round."""
        if self.weights is None or len(self.keys) == 1:
            return self.keys
        first = self._pick(self.weights)
        return [self.keys[first], *(k for i, k in enumerate(self.keys) if i != first)]

    def _pick(self, weights: list[int]) -> int:
        """Smooth weighted round robin: each queue gains its weight, the richest is
        picked and pays the total; picks spread evenly, never in long runs."""
        current = self._current
        for i, weight in enumerate(weights):
            current[i] += weight
        best = max(range(len(current)), key=current.__getitem__)
        current[best] -= sum(weights)
        return best
