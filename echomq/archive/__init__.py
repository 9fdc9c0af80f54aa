"""The archive: declared outcome streams folded into an LMDB floor and object storage.

``declare`` a queue, run a :class:`Driver` (``fold``) on a schedule, read audits from the
:class:`Floor`, and ``restore`` a floor on a fresh machine from the remote alone;
``prune`` forgets what is older than a queue's retention (``set_keep``) and ``compact``
merges small slice objects into packs.
"""

from echomq.archive.compact import COMPACT_CRASH_POINTS, CompactReport, compact
from echomq.archive.driver import CRASH_POINTS, Driver, fold_declared
from echomq.archive.entries import ArchivedEntry, Outcome, QuarantinedEntry
from echomq.archive.floor import Floor
from echomq.archive.floor_gaps import Gap
from echomq.archive.floor_reads import Audit, FloorStatus
from echomq.archive.manifest import Manifest
from echomq.archive.prune import (
    PRUNE_CRASH_POINTS,
    PruneReport,
    keep_of,
    prune,
    prune_declared,
    set_keep,
)
from echomq.archive.remote import Remote
from echomq.archive.replay import replay
from echomq.archive.report import FoldReport, QueueReport
from echomq.archive.restore import restore
from echomq.archive.restore_plan import plan
from echomq.archive.s3_remote import S3Remote
from echomq.archive.verify import verify
from echomq.errors import (
    ChainBroken,
    FloorError,
    FloorFull,
    FloorGap,
    JobNotArchived,
    LeaseLost,
    ManifestConflict,
    ManifestCorrupt,
    ManifestMissing,
    NotArchiveOfRecord,
    NotDeclared,
    PayloadNotRecorded,
    PayloadUnreadable,
    RemoteConflict,
    RemoteRefused,
    SliceCorrupt,
    StreamGap,
    StreamRewound,
    UploadUnconfirmed,
)
from echomq.queue.declared import (
    archive_of_record,
    declare,
    declared_queues,
    is_declared,
    record_address,
    records_payload,
    undeclare,
)

__all__ = [
    "COMPACT_CRASH_POINTS",
    "CRASH_POINTS",
    "PRUNE_CRASH_POINTS",
    "ArchivedEntry",
    "Audit",
    "ChainBroken",
    "CompactReport",
    "Driver",
    "Floor",
    "FloorError",
    "FloorFull",
    "FloorGap",
    "FloorStatus",
    "FoldReport",
    "Gap",
    "JobNotArchived",
    "LeaseLost",
    "Manifest",
    "ManifestConflict",
    "ManifestCorrupt",
    "ManifestMissing",
    "NotArchiveOfRecord",
    "NotDeclared",
    "Outcome",
    "PayloadNotRecorded",
    "PayloadUnreadable",
    "PruneReport",
    "QuarantinedEntry",
    "QueueReport",
    "Remote",
    "RemoteConflict",
    "RemoteRefused",
    "S3Remote",
    "SliceCorrupt",
    "StreamGap",
    "StreamRewound",
    "UploadUnconfirmed",
    "archive_of_record",
    "compact",
    "declare",
    "declared_queues",
    "fold_declared",
    "is_declared",
    "keep_of",
    "plan",
    "prune",
    "prune_declared",
    "record_address",
    "records_payload",
    "replay",
    "restore",
    "set_keep",
    "undeclare",
    "verify",
]
