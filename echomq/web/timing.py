"""Times as a person reads them: "3 min ago", "in 20 s", durations, tries and progress.

Every time is on the server's clock (the scripts stamp rows with it), so a page reads the
server's ``TIME`` once and measures against that: a browser or a dashboard host with a
wrong clock shows the same ages. The relative text carries the absolute time, ISO 8601 in
UTC, in a ``<time datetime>`` with a ``title`` (shown on hover).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jinja2
from markupsafe import Markup, escape

from echomq.records import Job


def iso(ms: int | str | None) -> str | None:
    """Milliseconds since the epoch as ISO 8601 UTC text (None when not a time)."""
    if ms in (None, ""):
        return None
    try:  # an archived entry's time is what its writer put there
        stamp = datetime.fromtimestamp(int(ms) / 1000, tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def span(ms: int | float | None) -> str:
    """A duration in ms as short text: ``850 ms``, ``4.2 s``, ``3 min 4 s``, ``2 h 5 min``."""
    if ms is None:
        return "-"
    ms = max(0, int(ms))
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{int(seconds)} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{hours // 24} d {hours % 24} h"


def relative(ms: int | str | None, now_ms: int) -> str:
    """``3 min ago`` or ``in 20 s`` from ``now_ms``; ``-`` when not a time."""
    if iso(ms) is None:
        return "-"
    delta = int(ms) - now_ms  # type: ignore[arg-type]
    if abs(delta) < 1000:
        return "now"
    return f"in {span(delta)}" if delta > 0 else f"{span(-delta)} ago"


@jinja2.pass_context
def when_tag(context: Any, ms: int | str | None) -> Markup:
    """A ``<time>`` element: the relative text, the absolute time on hover."""
    stamp = iso(ms)
    if stamp is None:
        return Markup("-")
    now = context.get("now_ms")
    text = relative(ms, int(now) if now is not None else _local_ms())
    return Markup('<time datetime="{0}" title="{0}">{1}</time>').format(escape(stamp),
                                                                       escape(text))


def _local_ms() -> int:
    return int(datetime.now(tz=UTC).timestamp() * 1000)


def fraction(progress: Any) -> float | None:
    """A progress value as a fraction 0..1, when it is one: a number in 0..1, or
    ``{"done": n, "of": m}`` with m > 0 (clamped); None for anything else."""
    if isinstance(progress, bool):
        return None
    if isinstance(progress, int | float):
        return float(progress) if 0 <= progress <= 1 else None
    if isinstance(progress, dict) and set(progress) >= {"done", "of"}:
        done, of = progress["done"], progress["of"]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in (done, of)) \
                and of > 0:
            return float(min(1.0, max(0.0, done / of)))
    return None


def _num(raw: dict[str, str], name: str) -> int:
    try:
        return int(raw.get(name) or 0)
    except ValueError:
        return 0


@dataclass(frozen=True)
class Timing:
    """What a job's row says about time and tries, with its set's score."""

    tries: int
    """Tries of this round: claims less hand-backs, counted afresh after a dead-letter
    retry (``tries_base``), as ``fail-3.lua`` counts them against ``max_attempts``."""
    max_attempts: int
    retried: int
    duration_ms: int | None
    """Claimed to finished (the last attempt's run time), for a finished job."""
    elapsed_ms: int | None
    """Claimed to now, for a running job."""
    waited_ms: int | None
    """Created to now, for a waiting job."""
    due_ms: int | None
    """When a scheduled job becomes due (its score in the scheduled set)."""
    lease_ms: int | None
    """When a running job's lease ends (its score in the active set)."""
    progress: float | None
    waiting: bool
    """Pending or scheduled: its next claim is the attempt after ``tries``."""

    @property
    def attempt_text(self) -> str:
        """``attempt 2 of 3`` (the one running or the one that settled), for a job
        waiting ``next: attempt 2 of 3``; ``retried from dead 1x`` when it was."""
        most = self.max_attempts
        if self.waiting:
            text = (f"not tried yet (of {most})" if self.tries == 0
                    else f"next: attempt {self.tries + 1} of {most}")
        elif self.tries > most:  # a release, or a row written by hand: no "4 of 3"
            text = f"attempt {self.tries} (of {most})"
        else:
            text = f"attempt {self.tries} of {most}"
        return text + (f", retried from dead {self.retried}x" if self.retried else "")

    @property
    def percent(self) -> int | None:
        return None if self.progress is None else round(self.progress * 100)


def timing(job: Job, score: float | None, now_ms: int) -> Timing:
    """``job``'s times and tries; ``score`` is its score in its state's set (the due time
    of a scheduled job, the lease deadline of a running one)."""
    raw = job.raw
    tries = max(0, job.attempts - _num(raw, "released") - _num(raw, "tries_base"))
    state = job.state.value
    finished = state in ("completed", "dead")
    duration = (job.finished_at - job.claimed_at
                if finished and job.finished_at and job.claimed_at else None)
    elapsed = now_ms - job.claimed_at if state == "active" and job.claimed_at else None
    waited = (now_ms - job.created_at
              if state in ("pending", "scheduled") and job.created_at else None)
    at = None if score is None else int(score)
    return Timing(tries, job.max_attempts, job.retried, duration, elapsed, waited,
                  at if state == "scheduled" else None, at if state == "active" else None,
                  fraction(job.progress), state in ("pending", "scheduled"))
