"""The worker wing: one Consumer's claim loop, handler context, settler and beat.

``consumer`` assembles them; ``claim_loop`` claims batches into the ``held``
ledger; ``context`` runs a handler and turns its answer into a ``HandlerOutcome``;
``settler`` settles outcomes many per round trip; ``beat`` renews leases and runs
the recovery leg. Everything here builds and reads transitions through
:mod:`echomq.queue.transitions` and uses the verbs of :mod:`echomq.jobs`.
"""

from echomq.worker.consumer import Consumer
from echomq.worker.context import HandlerOutcome, JobContext

__all__ = ["Consumer", "HandlerOutcome", "JobContext"]
