"""Tracing with a real OpenTelemetry SDK and its in-memory exporter: the handler's span is
the child of the add's span across a real Consumer (the trace context rides in the row),
and with tracing off add and a Consumer run where OpenTelemetry cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import echomq
from echomq import tracing
from echomq.queue.connection import Connection
from echomq.worker.consumer import Consumer
from tests.support import ROOT, consumers
from tests.support.waits import wait_until


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(tracer_provider=provider)
    try:
        yield exporter
    finally:
        tracing.disable()
        provider.shutdown()


def handler(job: Any) -> Any:
    if job.payload.get("fail"):
        raise RuntimeError("boom")
    return {"ok": True}


def run_until(conn: Connection, queue: str, done: Any) -> None:
    consumers.run_until(conn, queue, handler, done)


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_the_handler_span_is_the_child_of_the_add_span(
    conn: Connection, queue: str, spans: InMemorySpanExporter
) -> None:
    job_id = echomq.add(conn, queue, {"n": 1})
    batch = echomq.add_many(conn, queue, [{"n": 2}, {"fail": True}], max_attempts=1)
    run_until(conn, queue, lambda: echomq.counts(conn, queue).completed == 2
              and echomq.counts(conn, queue).dead == 1)
    wait_until(lambda: len(named(spans, f"settle {queue}")) == 3)

    adds = named(spans, f"add {queue}")
    processes = {s.attributes["messaging.message.id"]: s  # type: ignore[index]
                 for s in named(spans, f"process {queue}")}
    settles = named(spans, f"settle {queue}")
    assert len(adds) == 2 and set(processes) == {job_id, *batch}
    single, many = adds
    assert single.kind == SpanKind.PRODUCER
    for process_id, add in ((job_id, single), (batch[0], many), (batch[1], many)):
        process = processes[process_id]
        assert process.kind == SpanKind.CONSUMER
        assert process.parent is not None and add.context is not None
        assert process.parent.span_id == add.context.span_id
        assert process.context is not None
        assert process.context.trace_id == add.context.trace_id
    failed = processes[batch[1]]
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["echomq.outcome"] == "failed"
    # every settle is the child of its handler's span
    parents = {s.parent.span_id for s in settles if s.parent is not None}
    assert parents == {p.context.span_id for p in processes.values() if p.context}
    claims = named(spans, f"claim {queue}")
    assert sum(s.attributes["messaging.batch.message_count"]  # type: ignore[index]
               for s in claims) == 3  # each job claimed once (the failing one has one try)


def test_inside_the_handler_the_current_span_is_its_process_span(
    conn: Connection, queue: str, spans: InMemorySpanExporter
) -> None:
    from opentelemetry import trace

    seen: list[int] = []
    echomq.add(conn, queue, {"n": 1})

    def inner(job: Any) -> None:  # a span the handler opens would be this one's child
        seen.append(trace.get_current_span().get_span_context().span_id)

    consumer = Consumer(conn, queue, inner, poll_ms=20, beat_ms=50)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signals": False})
    thread.start()
    try:
        wait_until(lambda: echomq.counts(conn, queue).completed == 1)
    finally:
        consumer.stop()
        thread.join(10)
    (process,) = named(spans, f"process {queue}")
    assert process.context is not None and seen == [process.context.span_id]


def test_with_tracing_off_no_row_carries_a_trace_and_opentelemetry_is_never_needed(
    server_url: str, queue: str
) -> None:
    # redis-py itself imports OpenTelemetry when it is installed, so the child hides it:
    # any import of it (by echomq or anyone) raises, and the whole path still runs
    code = f"""
import sys, threading
sys.modules["opentelemetry"] = None
import echomq
from echomq.worker.consumer import Consumer
conn = echomq.connect({server_url!r})
echomq.add(conn, {queue!r}, {{"n": 1}})
echomq.add_many(conn, {queue!r}, [{{"n": 2}}])
c = Consumer(conn, {queue!r}, lambda job: None, poll_ms=20)
t = threading.Thread(target=c.run, kwargs={{"install_signals": False}})
t.start()
import time
deadline = time.time() + 20
while echomq.counts(conn, {queue!r}).completed < 2 and time.time() < deadline:
    time.sleep(0.01)
c.stop(); t.join(10)
assert echomq.counts(conn, {queue!r}).completed == 2
print(sorted(m for m in sys.modules if m.startswith("opentelemetry.")))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    conn = echomq.connect(server_url)
    try:
        for job_id in ("1", "2"):
            job = conn.redis.hgetall(conn.keys(queue).job(job_id))
            assert job and "traceparent" not in job
    finally:
        conn.close()
