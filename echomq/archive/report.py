"""What the archive did for one queue: the fields a fold and a restore both report."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(slots=True)
class ArchiveReport:
    """One queue's counts: slices handled, stream entries in them, quarantined among them.

    :class:`~echomq.archive.driver.FoldReport` (a fold) and
    :class:`~echomq.archive.restore.QueueReport` (a restore or a verify) extend it.
    """

    queue: str
    entries: int = 0
    quarantined: int = 0
    slices: int = 0

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
