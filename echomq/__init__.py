"""EchoMQ: a reliable job queue on Redis/Valkey whose history outlives Redis memory.

Every verb takes a connection explicitly; every failure raises a subclass of
:class:`EchoMQError` named after its reason. See DESIGN.md for the states.
"""

from typing import TYPE_CHECKING, Any

from echomq import cancel, tracing
from echomq.app.app import App
from echomq.app.connect import connect
from echomq.app.task import Task
from echomq.errors import (
    ArchiveError,
    ChecksumMismatch,
    ConnectionFailed,
    ConsumerCrashed,
    EchoMQError,
    HistoryNotArchived,
    InvalidArgument,
    InvalidKey,
    JobGone,
    LaneNotNative,
    LeaseHeld,
    MissingSlice,
    NotActive,
    NotCancellable,
    NotRemovable,
    NotScheduled,
    QueueBusy,
    RemoteUnavailable,
    ScheduleGone,
    StaleToken,
    StreamUnavailable,
    WaitTimeout,
)
from echomq.jobs.lease import extend_lock, reap
from echomq.jobs.progress import report_progress
from echomq.jobs.settle import complete, complete_many, fail, release_many, remove_job
from echomq.jobs.stalled import stalled_check
from echomq.models import (
    CancelVerdict,
    ClaimedJob,
    Counts,
    Job,
    JobState,
    Purged,
    Retention,
    Schedule,
    StalledSweep,
)
from echomq.queue.admin import counts, dead_jobs, get_job, metrics, set_group_limit
from echomq.queue.bulk import drain, obliterate
from echomq.queue.claim import claim
from echomq.queue.connection import Connection
from echomq.queue.control import is_paused, pause, promote, resume, retry_dead
from echomq.queue.directory import queues
from echomq.queue.enqueue import add, add_many
from echomq.queue.events import Event, EventKind, publish
from echomq.queue.listen import EventStream, events
from echomq.queue.listing import list_jobs
from echomq.queue.retention import (
    RetentionReport,
    apply_retention,
    purge,
    retention,
    set_retention,
)
from echomq.queue.wait import wait
from echomq.worker.consumer import Consumer
from echomq.worker.context import JobContext, current_job
from echomq.worker.retry import Backoff, Fail, Fixed, Retry, RetryPolicy

if TYPE_CHECKING:
    from echomq import aio, archive
    from echomq.scheduling.cron import schedule, schedules, unschedule
    from echomq.scheduling.scheduler import BatchScheduler

    __version__: str


def __getattr__(name: str) -> Any:
    """``echomq.archive``, ``echomq.BatchScheduler`` and the cron verbs load on first use:
    they bring boto3 and APScheduler, which a worker or a producer never needs; so do
    ``echomq.aio`` (the asyncio verbs, which a sync program never needs) and
    ``__version__``, read from the installed distribution's metadata."""
    import importlib

    if name == "__version__":
        return _version()
    if name in ("schedule", "schedules", "unschedule"):
        return getattr(importlib.import_module("echomq.scheduling.cron"), name)

    if name in ("archive", "aio"):
        return importlib.import_module(f"echomq.{name}")
    if name == "BatchScheduler":
        return importlib.import_module("echomq.scheduling.scheduler").BatchScheduler
    raise AttributeError(f"module 'echomq' has no attribute {name!r}")

__all__ = [
    "App",
    "ArchiveError",
    "Backoff",
    "BatchScheduler",
    "CancelVerdict",
    "ChecksumMismatch",
    "ClaimedJob",
    "Connection",
    "ConnectionFailed",
    "Consumer",
    "ConsumerCrashed",
    "Counts",
    "EchoMQError",
    "Event",
    "EventKind",
    "EventStream",
    "Fail",
    "Fixed",
    "HistoryNotArchived",
    "InvalidArgument",
    "InvalidKey",
    "Job",
    "JobContext",
    "JobGone",
    "JobState",
    "LaneNotNative",
    "LeaseHeld",
    "MissingSlice",
    "NotActive",
    "NotCancellable",
    "NotRemovable",
    "NotScheduled",
    "Purged",
    "QueueBusy",
    "RemoteUnavailable",
    "Retention",
    "RetentionReport",
    "Retry",
    "RetryPolicy",
    "Schedule",
    "ScheduleGone",
    "StaleToken",
    "StalledSweep",
    "StreamUnavailable",
    "Task",
    "WaitTimeout",
    "add",
    "add_many",
    "apply_retention",
    "aio",
    "archive",
    "cancel",
    "claim",
    "complete",
    "complete_many",
    "connect",
    "counts",
    "current_job",
    "dead_jobs",
    "drain",
    "events",
    "extend_lock",
    "fail",
    "get_job",
    "is_paused",
    "list_jobs",
    "metrics",
    "obliterate",
    "pause",
    "promote",
    "publish",
    "purge",
    "queues",
    "reap",
    "release_many",
    "remove_job",
    "report_progress",
    "resume",
    "retention",
    "retry_dead",
    "schedule",
    "schedules",
    "set_group_limit",
    "set_retention",
    "stalled_check",
    "tracing",
    "unschedule",
    "wait",
]


def _version() -> str:
    """``echomq.__version__``: the version pyproject.toml declares, the only place it is
    written, as the installed distribution reports it (read on first use, so an import
    pays nothing for it). A source tree that was never installed has none to report."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("echomq")
    except PackageNotFoundError:
        return "0+unknown"
