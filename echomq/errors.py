"""Every failure a caller can catch, one class per reason.

The seed answers ``{:error, reason}``; here each reason is a subclass of
:class:`EchoMQError`, so ``except echomq.StaleToken`` catches exactly one case.
"""

from __future__ import annotations

from typing import Protocol


class EchoMQError(Exception):
    """Root of every error EchoMQ raises on purpose."""


class InvalidKey(EchoMQError, ValueError):
    """A queue name or job id the key builder refuses (raised before the wire)."""


class InvalidArgument(EchoMQError, ValueError):
    """A lease, count, threshold or payload refused before the wire."""


class JobGone(EchoMQError):
    """The job's row does not exist (never added, removed or trimmed)."""


class StaleToken(EchoMQError):
    """The caller's fencing token no longer equals the row's ``attempts``."""


class NotActive(EchoMQError):
    """The token holds but the id has left the active set (reaped or swept)."""


class NotCancellable(EchoMQError):
    """A cancel request reached a job in a state that cannot be cancelled."""


class NotRemovable(EchoMQError):
    """``remove_job`` reached a job a worker holds (active): it settles first."""


class NotScheduled(EchoMQError):
    """``promote`` reached a job that is not scheduled (pending, active or finished)."""


class WaitTimeout(EchoMQError, TimeoutError):
    """``wait`` gave up: the job did not finish within the timeout (the message names it)."""

    def __init__(self, queue: str, job_id: str, timeout_s: float) -> None:
        super().__init__(f"job {job_id!r} of queue {queue!r} did not finish within "
                         f"{timeout_s:g}s")
        self.queue, self.job_id, self.timeout_s = queue, job_id, timeout_s
class QueueBusy(EchoMQError):
    """A queue-wide operation met work it must not destroy: ``obliterate`` while jobs are
    active, or an ``add`` or a ``resume`` while the queue is being obliterated."""


class HistoryNotArchived(QueueBusy):
    """``obliterate`` of a queue whose declared outcome stream still holds entries the
    archive has not folded and trimmed: removing it would lose that history."""


class ScheduleGone(EchoMQError):
    """A cron schedule was removed or replaced between a scheduler reading it and firing it."""


class LaneNotNative(EchoMQError):
    """The functions executor's stalled sweep refuses grouped expired rows."""


class ConsumerCrashed(EchoMQError):
    """A Consumer thread met an exception it could not handle; the Consumer stopped."""


class ConnectionFailed(EchoMQError, ConnectionError):
    """The server at the given URL could not be reached."""


class PortTaken(ConnectionFailed):
    """Another process answered on the free port a server we started was to bind (it took
    the port between the pick and the bind)."""


class ArchiveError(EchoMQError):
    """Base of the archive's failures."""


class LeaseHeld(ArchiveError):
    """Another driver holds the fold lease for this stream."""


class StreamUnavailable(ArchiveError):
    """The Redis server behind a stream failed mid-fold; the next fold picks up."""


class RemoteUnavailable(ArchiveError):
    """The object store could not be reached or kept failing; nothing was trimmed."""


class ChecksumMismatch(ArchiveError):
    """An archived object's bytes do not match its recorded checksum."""


class MissingSlice(ArchiveError):
    """The remote's slices do not chain: a range is missing."""


class CancelledError(EchoMQError):
    """Raised by ``check_or_raise`` at a safe point of a cancelled handler."""

    def __init__(self, reason: str | None) -> None:
        super().__init__(f"cancelled: {reason}" if reason else "cancelled")
        self.reason = reason


# -- the archive's failures (all ArchiveError) -------------------------------------------


class LeaseLost(ArchiveError):
    """Our lease lapsed or was taken over mid-fold: we stop before trimming anything."""


class NotDeclared(ArchiveError):
    """The queue's stream is not declared; the archive never trims it."""


class NotArchiveOfRecord(ArchiveError):
    """The stream's archive of record is one this driver does not write: it never trims."""


class RemoteConflict(ArchiveError):
    """The remote's history and this floor's disagree; nothing is overwritten or trimmed."""


class StreamRewound(ArchiveError):
    """The stream's ids went backwards past the floor's checkpoint; it is not trimmed."""


class LostRange(Protocol):
    """What :class:`StreamGap` reports: ``echomq.archive.Gap`` has this shape."""

    @property
    def queue(self) -> str: ...
    @property
    def after(self) -> str: ...
    @property
    def upto(self) -> str: ...
    @property
    def count(self) -> int | None: ...


class StreamGap(ArchiveError):
    """Entries after the floor's checkpoint left the stream before the floor took them.

    ``after``/``upto`` bound the lost ids (``after`` < id <= ``upto``), ``count`` is how
    many (``None``: unknown). The gap is recorded in the floor; nothing is trimmed until
    :meth:`Driver.acknowledge_gap` accepts it.
    """

    def __init__(self, gap: LostRange) -> None:
        count = "an unknown number of" if gap.count is None else str(gap.count)
        super().__init__(
            f"the outcome stream of {gap.queue!r} lost {count} entries after the floor's "
            f"checkpoint {gap.after} (ids up to {gap.upto}) before they were folded: "
            "trimmed or deleted outside the archive. Nothing is folded or trimmed until an "
            "operator acknowledges the gap (Driver.acknowledge_gap / emq archive ack-gap)."
        )
        self.gap = gap
        self.queue, self.after, self.upto, self.count = gap.queue, gap.after, gap.upto, gap.count


class FloorError(ArchiveError):
    """The floor's LMDB store failed; the message names the floor and the cause."""


class FloorFull(FloorError):
    """The filesystem under the floor has no room for what the floor must write."""


class FloorGap(ArchiveError):
    """A slice would leave a hole after the floor's checkpoint; it is refused."""


class RemoteRefused(RemoteUnavailable):
    """The store answered, but refused (credentials, permissions, a missing bucket)."""


class UploadUnconfirmed(RemoteRefused):
    """The store accepted an upload, but the object is not there as sent; nothing that
    relies on it is trimmed."""


class ManifestConflict(ArchiveError):
    """The manifest moved under us, or the update would move it backwards."""


class ManifestCorrupt(ArchiveError):
    """The manifest cannot be read: not JSON, an unknown or older format, or inconsistent."""


class ManifestMissing(MissingSlice):
    """The bucket holds slices of a queue but no manifest: its newest history may have been
    cut. Restore from the chain alone only when asked (``rebuild_manifest=True``)."""


class SliceCorrupt(ChecksumMismatch):
    """A slice object's bytes are not the slice its name and checksum promise."""


class ChainBroken(ChecksumMismatch):
    """A slice's digest is not the one its successor, the manifest or the floor recorded:
    it was rewritten, replaced or moved."""


class LauncherError(ArchiveError):
    """A local S3 endpoint could not be started."""


class JobNotArchived(ArchiveError):
    """The floor holds no outcome of that job (never settled on a declared queue, not
    folded yet, or another queue's): there is nothing to replay."""


class PayloadNotRecorded(ArchiveError):
    """The job's archived outcome carries no payload: its queue was not declared with
    ``payload=True`` when it settled, so it cannot be replayed from the archive."""


class PayloadUnreadable(ArchiveError):
    """The job's archived payload is not JSON the queue can take (another writer's entry in
    the outcome stream, or JSON nested too deep to read): nothing is enqueued."""


class ExtraMissing(EchoMQError, ImportError):
    """An optional extra is not installed (``Floor.query`` and ``Floor.export`` need
    ``echomq[sql]``); the message says what to install."""


class QueryFailed(ArchiveError):
    """DuckDB refused a query over the archive's history; the message is DuckDB's."""


# -- what a job's run ends with (tasks and workers) ---------------------------------------


class Retry(EchoMQError):  # noqa: N818 - raised by a handler as a command: "retry"
    """Raise from a handler to try the job again after ``delay_ms`` (an attempt is used
    up: the last one dead-letters the job). Without a delay the policy's backoff applies."""

    def __init__(self, delay_ms: int | None = None, reason: str = "") -> None:
        if delay_ms is not None and (isinstance(delay_ms, bool) or not isinstance(
                delay_ms, int) or not 0 <= delay_ms <= MAX_RETRY_DELAY_MS):
            raise InvalidArgument(f"Retry(delay_ms=) must be an int of milliseconds between "
                                  f"0 and {MAX_RETRY_DELAY_MS}, got {delay_ms!r}")
        self.delay_ms = delay_ms
        self.reason = reason
        super().__init__(reason or (f"retry in {delay_ms} ms" if delay_ms is not None
                                    else "retry"))


MAX_RETRY_DELAY_MS = 365 * 24 * 3_600_000
"""The longest retry delay accepted (a year): a larger one is surely a unit mistake."""


MAX_RATE_WINDOW_MS = 86_400_000
"""The longest rate-limit window, and the longest wait a handler's :class:`RateLimited`
asks for (a day): a longer one is surely a unit mistake."""


class RateLimited(EchoMQError):  # noqa: N818 - raised by a handler as a command: "wait"
    """Raise from a handler that met an outside rate limit (an HTTP 429): the job goes
    back to pending, not counted as a try, and its queue (its group, when the job is
    grouped) starts nothing more for ``delay_ms``."""

    def __init__(self, delay_ms: int, reason: str = "") -> None:
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or not (
                0 <= delay_ms <= MAX_RATE_WINDOW_MS):
            raise InvalidArgument(f"RateLimited(delay_ms=) must be an int of milliseconds "
                                  f"between 0 and {MAX_RATE_WINDOW_MS}, got {delay_ms!r}")
        self.delay_ms = delay_ms
        self.reason = reason
        super().__init__(reason or f"rate limited: wait {delay_ms} ms")


class Fail(EchoMQError):  # noqa: N818 - raised by a handler as a command: "fail for good"
    """Raise from a handler to dead-letter the job at once: no retry would help."""


class JobTimeout(EchoMQError):  # noqa: N818 - the job's error, named as users read it
    """A run that reached its timeout (the error its job keeps)."""


class UnknownTask(EchoMQError):  # noqa: N818 - a job's name, as the job's error
    """A job whose name no task of the worker that claimed it has."""


class ProcessDied(EchoMQError):  # noqa: N818 - the error a dead child's jobs keep
    """The worker process that held a job died."""
