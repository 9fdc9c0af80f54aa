"""EchoMQ: a reliable job queue on Redis/Valkey whose history outlives Redis memory.

Every verb takes a connection explicitly; every failure raises a subclass of
:class:`EchoMQError` named after its reason. See DESIGN.md for the states.
"""

from typing import TYPE_CHECKING, Any

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
from echomq.queue.connection import Connection

_LAZY: dict[str, str] = {
    "cancel": "echomq.cancel:",
    "tracing": "echomq.tracing:",
    "archive": "echomq.archive:",
    "aio": "echomq.aio:",
    "extend_lock": "echomq.jobs.lease",
    "reap": "echomq.jobs.lease",
    "report_progress": "echomq.jobs.progress",
    "complete": "echomq.jobs.settle",
    "complete_many": "echomq.jobs.settle",
    "fail": "echomq.jobs.settle",
    "release_many": "echomq.jobs.settle",
    "remove_job": "echomq.jobs.settle",
    "stalled_check": "echomq.jobs.stalled",
    "CancelVerdict": "echomq.models",
    "ClaimedJob": "echomq.models",
    "Counts": "echomq.records",
    "Job": "echomq.records",
    "JobState": "echomq.models",
    "Purged": "echomq.records",
    "Retention": "echomq.records",
    "Schedule": "echomq.records",
    "StalledSweep": "echomq.models",
    "HeldJob": "echomq.records",
    "WorkerInfo": "echomq.records",
    "workers": "echomq.queue.workers",
    "counts": "echomq.queue.admin",
    "dead_jobs": "echomq.queue.admin",
    "get_job": "echomq.queue.admin",
    "metrics": "echomq.queue.admin",
    "set_group_limit": "echomq.queue.admin",
    "drain": "echomq.queue.bulk",
    "obliterate": "echomq.queue.bulk",
    "claim": "echomq.queue.claim",
    "is_paused": "echomq.queue.control",
    "pause": "echomq.queue.control",
    "promote": "echomq.queue.control",
    "resume": "echomq.queue.control",
    "retry_dead": "echomq.queue.control",
    "queues": "echomq.queue.directory",
    "add": "echomq.queue.enqueue",
    "add_many": "echomq.queue.enqueue",
    "Event": "echomq.queue.events",
    "EventKind": "echomq.queue.events",
    "publish": "echomq.queue.events",
    "EventStream": "echomq.queue.listen",
    "events": "echomq.queue.listen",
    "list_jobs": "echomq.queue.listing",
    "RateLimit": "echomq.queue.rate_limits",
    "clear_rate_limit": "echomq.queue.rate_limits",
    "rate_limits": "echomq.queue.rate_limits",
    "set_rate_limit": "echomq.queue.rate_limits",
    "RetentionReport": "echomq.queue.retention",
    "apply_retention": "echomq.queue.retention",
    "purge": "echomq.queue.retention",
    "retention": "echomq.queue.retention",
    "set_retention": "echomq.queue.retention",
    "wait": "echomq.queue.wait",
    "Consumer": "echomq.worker.consumer",
    "JobContext": "echomq.worker.context",
    "current_job": "echomq.worker.context",
    "Backoff": "echomq.worker.retry",
    "Fail": "echomq.errors",
    "Fixed": "echomq.worker.retry",
    "Retry": "echomq.errors",
    "RateLimited": "echomq.errors",
    "RetryPolicy": "echomq.worker.retry",
    "App": "echomq.app.app",
    "Task": "echomq.app.task",
    "Signature": "echomq.app.flows",
    "chain": "echomq.app.flows",
    "group": "echomq.app.flows",
    "chord": "echomq.app.flows",
    "children": "echomq.queue.flows",
    "deliver_outbox": "echomq.queue.flows_across",
    "repair_flow": "echomq.queue.flows_across",
    "connect": "echomq.app.connect",
    "append_log": "echomq.jobs.joblog",
    "schedule": "echomq.scheduling.cron",
    "schedules": "echomq.scheduling.cron",
    "unschedule": "echomq.scheduling.cron",
    "pause_schedule": "echomq.scheduling.cron",
    "resume_schedule": "echomq.scheduling.cron",
    "BatchScheduler": "echomq.scheduling.scheduler",
}
"""Every other public name and the module that is its home ("module:" for a submodule),
loaded on first use: ``import echomq`` is on the start-up path of every producer and
worker, so it loads only the connection; a producer never loads the worker, a worker
never loads the launchers, and nobody loads boto3 or APScheduler by importing us."""

if TYPE_CHECKING:
    from echomq import aio, archive, cancel, tracing
    from echomq.app.app import App
    from echomq.app.connect import connect
    from echomq.app.flows import Signature, chain, chord, group
    from echomq.app.task import Task
    from echomq.errors import Fail, RateLimited, Retry
    from echomq.jobs.joblog import append_log
    from echomq.jobs.lease import extend_lock, reap
    from echomq.jobs.progress import report_progress
    from echomq.jobs.settle import complete, complete_many, fail, release_many, remove_job
    from echomq.jobs.stalled import stalled_check
    from echomq.models import CancelVerdict, ClaimedJob, JobState, StalledSweep
    from echomq.queue.admin import counts, dead_jobs, get_job, metrics, set_group_limit
    from echomq.queue.bulk import drain, obliterate
    from echomq.queue.claim import claim
    from echomq.queue.control import is_paused, pause, promote, resume, retry_dead
    from echomq.queue.directory import queues
    from echomq.queue.enqueue import add, add_many
    from echomq.queue.events import Event, EventKind, publish
    from echomq.queue.flows import children
    from echomq.queue.flows_across import deliver_outbox, repair_flow
    from echomq.queue.listen import EventStream, events
    from echomq.queue.listing import list_jobs
    from echomq.queue.rate_limits import RateLimit, clear_rate_limit, rate_limits, set_rate_limit
    from echomq.queue.retention import (
        RetentionReport,
        apply_retention,
        purge,
        retention,
        set_retention,
    )
    from echomq.queue.wait import wait
    from echomq.queue.workers import workers
    from echomq.records import Counts, HeldJob, Job, Purged, Retention, Schedule, WorkerInfo
    from echomq.scheduling.cron import (
        pause_schedule,
        resume_schedule,
        schedule,
        schedules,
        unschedule,
    )
    from echomq.scheduling.scheduler import BatchScheduler
    from echomq.worker.consumer import Consumer
    from echomq.worker.context import JobContext, current_job
    from echomq.worker.retry import Backoff, Fixed, RetryPolicy

    __version__: str


def __getattr__(name: str) -> Any:
    """The public names of :data:`_LAZY` load on first use, and each is then kept as a
    module attribute (a second use costs nothing); so does ``__version__``, read from
    the installed distribution's metadata."""
    import importlib

    if name == "__version__":
        return _version()
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'echomq' has no attribute {name!r}")
    module, submodule, _ = home.partition(":")
    value = importlib.import_module(module)
    if not submodule:
        value = getattr(value, name)
    globals()[name] = value
    return value


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
    "HeldJob",
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
    "RateLimit",
    "RateLimited",
    "RemoteUnavailable",
    "Retention",
    "RetentionReport",
    "Retry",
    "RetryPolicy",
    "Schedule",
    "ScheduleGone",
    "Signature",
    "StaleToken",
    "StalledSweep",
    "StreamUnavailable",
    "Task",
    "WaitTimeout",
    "WorkerInfo",
    "add",
    "add_many",
    "append_log",
    "apply_retention",
    "aio",
    "archive",
    "cancel",
    "chain",
    "children",
    "chord",
    "claim",
    "clear_rate_limit",
    "complete",
    "complete_many",
    "connect",
    "counts",
    "current_job",
    "dead_jobs",
    "deliver_outbox",
    "drain",
    "events",
    "extend_lock",
    "fail",
    "get_job",
    "group",
    "is_paused",
    "list_jobs",
    "metrics",
    "obliterate",
    "pause",
    "pause_schedule",
    "promote",
    "publish",
    "purge",
    "queues",
    "rate_limits",
    "reap",
    "release_many",
    "remove_job",
    "repair_flow",
    "report_progress",
    "resume",
    "resume_schedule",
    "retention",
    "retry_dead",
    "schedule",
    "schedules",
    "set_group_limit",
    "set_rate_limit",
    "set_retention",
    "stalled_check",
    "tracing",
    "unschedule",
    "wait",
    "workers",
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
