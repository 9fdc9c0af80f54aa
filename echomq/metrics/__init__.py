"""Prometheus metrics for EchoMQ, computed at scrape time (``pip install 'echomq[metrics]'``).

``render(conn, floor=None)`` returns one scrape's text exposition and its content type:
the dashboard serves it at ``/metrics``, ``emq metrics`` on its own port. See
:mod:`echomq.metrics.collector` for what is read and why the counters live in Redis.

``echomq.metrics`` was already the name of a verb (``echomq.metrics(conn, queue)``, the
queue's completed and failed counts). Importing this package would replace that attribute
of ``echomq`` with the module, so the module is made callable and calls the verb: both
spellings keep working.
"""

from __future__ import annotations

import sys
import types

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from echomq.metrics.collector import BUCKETS_MS, EchoCollector, FloorArg
from echomq.queue import admin
from echomq.queue.connection import Connection

__all__ = ["BUCKETS_MS", "CONTENT_TYPE_LATEST", "EchoCollector", "registry", "render"]


def registry(conn: Connection, floor: FloorArg = None) -> CollectorRegistry:
    """A registry holding only EchoMQ's collector (no process metrics: they would describe
    the exporter, not the queues)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(EchoCollector(conn, floor))
    return reg


def render(conn: Connection, floor: FloorArg = None) -> tuple[bytes, str]:
    """One scrape: the text exposition of every known queue, and its content type."""
    return generate_latest(registry(conn, floor)), CONTENT_TYPE_LATEST


class _CallableModule(types.ModuleType):
    """``echomq.metrics(conn, queue)`` still calls the verb of that name."""

    def __call__(self, conn: Connection, queue: str) -> dict[str, int]:
        return admin.metrics(conn, queue)


sys.modules[__name__].__class__ = _CallableModule
