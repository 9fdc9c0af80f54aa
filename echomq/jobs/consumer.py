"""``echomq.jobs.consumer.Consumer``: the Consumer lives in :mod:`echomq.worker`."""

from echomq.worker.consumer import Consumer

__all__ = ["Consumer"]
