"""``emq archive ...``: fold, status, audit, show, restore, verify, ack-gap, replay, query,
export, prune, compact (and declare).

Every command takes the floor path and the remote's settings as options, each with an
environment variable, so a deployment sets ``EMQ_FLOOR`` and ``EMQ_S3_*`` once. ``--json``
prints machine-readable output (JSON lines for audits) for scripts. The commands that
reach Redis use the root's ``--url``, ``--data-dir`` and ``--executor`` (their own
``--url`` overrides the root's), through the one options context.

This module is the group alone; the commands live by concern: reaching Redis
(:mod:`echomq.cli.archive_fold`), reading the floor (:mod:`echomq.cli.archive_floor`),
the bucket (:mod:`echomq.cli.archive_restore`), replay, SQL and exports, retention and
compaction; their shared options and output in :mod:`echomq.cli.archive_options` and
:mod:`echomq.cli.archive_output`.
"""

from __future__ import annotations

import click

from echomq.cli.app import Group
from echomq.cli.archive_floor import ack_gap_cmd, audit_cmd, show_cmd, status_cmd
from echomq.cli.archive_fold import declare_cmd, fold_cmd, undeclare_cmd
from echomq.cli.archive_prune import compact_cmd, prune_cmd
from echomq.cli.archive_query import export_cmd, query_cmd
from echomq.cli.archive_replay import replay_cmd
from echomq.cli.archive_restore import restore_cmd, verify_cmd


@click.group("archive", cls=Group)
def archive() -> None:
    """The outcome archive: fold streams into the floor and S3; audit and restore."""


for _command in (declare_cmd, undeclare_cmd, fold_cmd, status_cmd, audit_cmd, show_cmd,
                 restore_cmd, verify_cmd, ack_gap_cmd, replay_cmd, query_cmd, export_cmd,
                 prune_cmd, compact_cmd):
    archive.add_command(_command)

archive_cli = archive
