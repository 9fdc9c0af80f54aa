"""Prometheus metrics for EchoMQ, computed at scrape time (``pip install 'echomq[metrics]'``).

``render(conn, floor=None)`` returns one scrape's text exposition and its content type:
the dashboard serves it at ``/metrics``, ``emq metrics`` on its own port. See
:mod:`echomq.prometheus.collector` for what is read and why the counters live in Redis.

It is ``echomq.prometheus``, not ``echomq.metrics``: that name is the verb that reads one
queue's lifetime totals per outcome (completed, cancelled, retried, dead).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from echomq.prometheus.collector import BUCKETS_MS, EchoCollector, FloorArg
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

