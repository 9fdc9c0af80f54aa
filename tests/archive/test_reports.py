"""One report shape: a fold's and a restore's reports share their per-queue counts."""

from __future__ import annotations

from dataclasses import fields

from echomq.archive import FoldReport, QueueReport
from echomq.archive.report import ArchiveReport

SHARED = ["queue", "entries", "quarantined", "slices"]


def test_fold_and_restore_reports_share_one_base() -> None:
    for report in (FoldReport, QueueReport):
        assert issubclass(report, ArchiveReport)
        assert [f.name for f in fields(report)][:4] == SHARED
        assert not {"to_dict", *SHARED} & set(vars(report))  # inherited, not repeated


def test_each_report_keeps_its_own_fields_in_its_dict() -> None:
    fold = FoldReport("q", entries=3, trimmed=2, error="x").to_dict()
    assert fold["queue"] == "q" and fold["entries"] == 3 and fold["trimmed"] == 2
    restored = QueueReport("q", slices=2, orphans=["a"]).to_dict()
    assert restored["slices"] == 2 and restored["orphans"] == ["a"]
    assert "trimmed" not in restored and "orphans" not in fold
