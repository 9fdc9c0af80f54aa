"""A driver's custody of the archive of record: whether its folds may mark and trim.

Only a driver that writes a stream's archive of record (see :mod:`echomq.queue.declared`)
marks the stream folded and trims it; any other folds into its floor and reports
``trim_refused``. A stream whose record nobody declared is claimed only by a driver told
to claim (by default, one with a remote), atomically inside its first fenced mark or trim:
a one-off floor-only fold must never take the stream from the deployment's archive.
"""

from __future__ import annotations

import logging

from echomq.archive.floor import Floor
from echomq.archive.fold_lease import FoldLease
from echomq.archive.remote import Remote
from echomq.queue.connection import Connection
from echomq.queue.declared import archive_of_record, record_address

log = logging.getLogger("echomq.archive.driver")  # one name for all a driver logs


class Custody:
    """The archives one driver writes (its remote, else its floor) and what it claims."""

    def __init__(self, conn: Connection, floor: Floor, remote: Remote | None,
                 claim: bool) -> None:
        self.conn = conn
        self.floor = floor
        self.remote = remote
        self.claim = claim
        """Whether this driver claims an archive of record nobody declared."""
        self._logged: set[tuple[str, str | None]] = set()  # refusals logged so far

    def archives(self) -> tuple[str, str]:
        """The record this driver claims (its remote, else its floor), and its floor."""
        floor = record_address(self.floor)
        if self.remote is None:
            return floor, ""
        return record_address(self.remote), floor

    def refusal(self, queue: str) -> str | None:
        """Why this driver may not trim ``queue`` (None: it writes the record, or the
        record is unset and this driver claims it; the fenced step checks again)."""
        record = archive_of_record(self.conn, queue)
        if (record is None and not self.claim) or (
                record is not None and record not in self.archives()):
            return self.refused(queue, record)
        return None

    def refused(self, queue: str, record: str | None) -> str:
        """Why this driver, which does not write ``record``, leaves the stream untrimmed
        (logged once per driver: a pass may come each second)."""
        writes = " and ".join(a for a in self.archives() if a)
        if record is None:
            reason = (
                f"no archive of record is declared for {queue!r}, and this driver does not "
                f"claim one for {writes} (only a driver with a remote claims it unasked), "
                "so it folds into its floor but never trims (nor marks the stream folded "
                "for retention); to make this floor the record: "
                f"`emq archive declare {queue} --custodian floor`, `emq archive fold "
                "--claim-custody`, or Driver(..., claim_custody=True)")
        else:
            reason = (
                f"the archive of record of {queue!r} is {record}; this driver writes "
                f"{writes}, so it folds into its floor but never trims (nor marks the "
                "stream folded for retention)")
        if (queue, record) not in self._logged:
            self._logged.add((queue, record))
            log.warning("archive: %s", reason)
        return reason

    def refused_now(self, queue: str) -> str:
        """The refusal after a fenced step found the record is another's."""
        return self.refused(queue, archive_of_record(self.conn, queue))

    def not_ours(self, queue: str) -> str | None:
        """Why ``fold_declared`` leaves ``queue`` to others: its archive of record is one
        this driver does not write (None: it may fold it)."""
        record = archive_of_record(self.conn, queue)
        if record is None or record in self.archives():
            return None
        if self.remote is None and record.startswith("floor:"):
            return (f"its archive of record is {record}, another driver's floor; a driver "
                    "without a remote cannot take a queue over from another floor "
                    "(give the drivers one shared remote)")
        return f"its archive of record is {record}, which this driver does not write"

    def mark(self, lease: FoldLease, checkpoint: str) -> None:
        """Move the queue's ``folded`` mark, fenced by the lease and the record; raises
        ``NotArchiveOfRecord`` when the record is another's."""
        writes, also = self.archives()
        lease.mark(checkpoint, writes, also, claim=self.claim)

    def trim(self, lease: FoldLease, minid: str) -> int:
        """Trim the stream below ``minid``, fenced as :meth:`mark`; how many went."""
        writes, also = self.archives()
        return lease.trim(minid, writes, also, claim=self.claim)
