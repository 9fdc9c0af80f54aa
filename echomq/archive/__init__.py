"""The archive: declared outcome streams folded into an LMDB floor and object storage.

``declare`` a queue, run a :class:`Driver` (``fold``) on a schedule, read audits from the
:class:`Floor`, and ``restore`` a floor on a fresh machine from the remote alone.
"""

from echomq.archive.declared import declare, declared_queues, is_declared, undeclare
from echomq.archive.driver import (
    CRASH_POINTS,
    Driver,
    FoldReport,
    RemoteConflict,
    StreamRewound,
    fold_declared,
)
from echomq.archive.entries import ArchivedEntry, Outcome, QuarantinedEntry
from echomq.archive.floor import Floor, FloorGap, FloorStatus
from echomq.archive.lease import LeaseLost, NotDeclared
from echomq.archive.remote import (
    Manifest,
    ManifestConflict,
    ManifestCorrupt,
    Remote,
    RemoteRefused,
    S3Remote,
    UploadUnconfirmed,
)
from echomq.archive.restore import ManifestMissing, QueueReport, plan, restore, verify
from echomq.archive.slices import ChainBroken, SliceCorrupt

__all__ = [
    "CRASH_POINTS",
    "ArchivedEntry",
    "ChainBroken",
    "Driver",
    "Floor",
    "FloorGap",
    "FloorStatus",
    "FoldReport",
    "LeaseLost",
    "Manifest",
    "ManifestConflict",
    "ManifestCorrupt",
    "ManifestMissing",
    "NotDeclared",
    "Outcome",
    "QuarantinedEntry",
    "QueueReport",
    "Remote",
    "RemoteConflict",
    "RemoteRefused",
    "S3Remote",
    "SliceCorrupt",
    "StreamRewound",
    "UploadUnconfirmed",
    "declare",
    "declared_queues",
    "fold_declared",
    "is_declared",
    "plan",
    "restore",
    "undeclare",
    "verify",
]
