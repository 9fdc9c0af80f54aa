"""Optional OpenTelemetry tracing: spans for add, claim, the handler and the settle.

Off until :func:`enable` is called (``pip install 'echomq[otel]'``). While off, the verbs
and the Consumer test one module global per call and OpenTelemetry is never imported.

When on, ``add`` / ``add_many`` open a PRODUCER span ``add <queue>`` and store its W3C
``traceparent`` in each job's row (field ``traceparent``, written by ``add-2.lua`` in the
same call). A Consumer reads the field of the jobs it claims (one pipelined ``HGET`` per
claim batch, only while tracing is on) and runs the handler inside a CONSUMER span
``process <queue>`` whose parent is the producer's span, as BullMQ's instrumentation
does: a trace crosses from the process that added the job to the one that ran it. Spans
the handler opens are children of ``process``. The claim (``claim <queue>``) and the
settle (``settle <queue>``, a child of ``process``) get their own spans.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

SYSTEM = "echomq"
_tracing: Tracing | None = None


def enable(tracer_provider: Any = None) -> Tracing:
    """Turn tracing on, with ``tracer_provider`` (default: OpenTelemetry's global one)."""
    global _tracing
    _tracing = Tracing(tracer_provider)
    return _tracing


def disable() -> None:
    """Turn tracing off again (spans already started end normally)."""
    global _tracing
    _tracing = None


def current() -> Tracing | None:
    """The active tracing, or ``None`` when off: the one check the hot paths make."""
    return _tracing


class Tracing:
    """An OpenTelemetry tracer and the W3C propagator, imported only here."""

    def __init__(self, tracer_provider: Any = None) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self._kind = trace.SpanKind
        self._status = trace.Status
        self._error = trace.StatusCode.ERROR
        self._propagator = TraceContextTextMapPropagator()
        self.tracer = trace.get_tracer("echomq", tracer_provider=tracer_provider)

    @staticmethod
    def _attributes(queue: str, **more: Any) -> dict[str, Any]:
        return {"messaging.system": SYSTEM, "messaging.destination.name": queue, **more}

    @contextmanager
    def add(self, queue: str, count: int) -> Iterator[str]:
        """A PRODUCER span around an add; yields the ``traceparent`` to store on the rows."""
        with self.tracer.start_as_current_span(
            f"add {queue}", kind=self._kind.PRODUCER,
            attributes=self._attributes(queue, **{"messaging.batch.message_count": count}),
        ):
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier)
            yield carrier.get("traceparent", "")

    @contextmanager
    def claim(self, queue: str) -> Iterator[Any]:
        """A CLIENT span around one claim round trip; yields the span (for its count)."""
        with self.tracer.start_as_current_span(
            f"claim {queue}", kind=self._kind.CLIENT, attributes=self._attributes(queue),
        ) as span:
            yield span

    def process(self, queue: str, job_id: str, attempt: int, traceparent: str | None
                ) -> Any:
        """Start the CONSUMER span of one handler run, the child of the producer's span
        (a root span when the job carries none); the caller ends it."""
        parent = self._propagator.extract(_carrier(traceparent))
        return self.tracer.start_span(
            f"process {queue}", context=parent, kind=self._kind.CONSUMER,
            attributes=self._attributes(queue, **{"messaging.message.id": job_id,
                                                  "echomq.attempt": attempt}),
        )

    @contextmanager
    def running(self, span: Any) -> Iterator[None]:
        """Make ``span`` current while the handler runs (its own spans become children)."""
        with self._trace.use_span(span, end_on_exit=False):
            yield

    def outcome(self, span: Any, kind: str, text: str) -> None:
        """Mark the handler span with how the run ended, and end it."""
        span.set_attribute("echomq.outcome", kind)
        if kind in ("failed", "rejected"):
            span.set_status(self._status(self._error, text.splitlines()[-1] if text else ""))
        span.end()

    def settle(self, queue: str, job_id: str, parent: Any) -> Any:
        """Start the span of one job's settle, a child of its handler span; the caller
        ends it when the settle's round trip returns."""
        context = self._trace.set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(
            f"settle {queue}", context=context, kind=self._kind.CLIENT,
            attributes=self._attributes(queue, **{"messaging.message.id": job_id}),
        )


def _carrier(traceparent: str | None) -> Mapping[str, str]:
    return {"traceparent": traceparent} if traceparent else {}
