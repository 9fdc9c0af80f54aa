"""Reading a scrape back the way Prometheus would: with prometheus_client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str | bytes) -> Samples:
    """Every sample of an exposition, by (sample name, labels)."""
    if isinstance(text, bytes):
        text = text.decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def queues_of(samples: Samples) -> set[str]:
    return {dict(labels)["queue"] for name, labels in samples if name == "echomq_jobs"}
