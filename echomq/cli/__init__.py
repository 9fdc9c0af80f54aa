"""``emq``: the command line, one package with a module per concern.

- :mod:`echomq.cli.app`: the root options, the one options context and the lazy command
  table (a command's imports are paid only when it runs);
- :mod:`echomq.cli.queue`: enqueue, cancel, sweep, reap, dead, purge, status;
- :mod:`echomq.cli.retention`: a queue's retention policy (durations read by
  :mod:`echomq.cli.durations`, the one duration type of every command's options);
- :mod:`echomq.cli.worker`: the worker and the scheduler;
- :mod:`echomq.cli.server`: the embedded Valkey of a folder;
- :mod:`echomq.cli.archive`: the ``emq archive ...`` group (boto3, LMDB and rich load only
  here), its commands by concern in ``archive_*`` modules;
- :mod:`echomq.cli.remote`: the one S3 remote builder, from the options and ``EMQ_S3_*``;
- :mod:`echomq.cli.text`: how values read in human output (JSON, ISO 8601 times);
- :mod:`echomq.cli.demo`: ``emq demo``, the whole pipeline through the public API.
"""

from echomq.cli.app import Options, main

__all__ = ["Options", "main"]
