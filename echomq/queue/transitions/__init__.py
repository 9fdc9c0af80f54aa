"""The catalogue of a job's transitions: each one's call beside the parser of its reply.

A call builder returns the ``Call`` an executor runs (the transition's name, its KEYS and
ARGV in the order its ``.lua`` header lists them); the parser next to it reads that
transition's reply. The verbs (``claim``, ``complete``, ``fail``, ...), the Consumer, its
settler and beat, the sweep, the operator's verbs and the archive's fold lease (whose
scripts live in ``echomq/archive/lua/``) all build and read through this package, so a
transition's wire shape is written once. Error codes map through the one reply table
(:mod:`echomq.queue.replies`); what a success code means is said here.

One catalogue, in modules by concern (each name has its one home there; this file only
documents):

- ``intake``: ``add``, ``cron_fire``, ``claim``;
- ``settles``: ``complete``, ``fail``, ``release``, ``remove_job`` (and ``Settlement``);
- ``leases``: ``extend_lock``, ``progress``, ``log``, ``reap``, ``stalled_check`` (and
  ``LEASE_LOST``);
- ``steering``: ``cancel``, ``pause``, ``resume``, ``promote``, ``group_limit``,
  ``retry_dead``;
- ``removals``: ``purge`` (retention), ``drain``, ``obliterate``;
- ``dedup``: ``add_dedup`` (an add under a dedup id);
- ``searching``: ``search_page`` (the dashboard's search, read only);
- ``flows``: ``flow_add`` (a chain's, group's or chord's jobs in one call), ``flow_ack`` (a
  child's outcome counted on its parent on another queue);
- ``folding``: the archive's fold lease (``fold_acquire`` ... ``fold_mark``);
- ``heartbeat``: a worker's record (``worker_beat``, ``worker_leave``);
- ``cron_specs``: a schedule's spec swapped if unchanged (``cron_swap``);
- ``rates``: ``rate_limit``, ``rate_limited`` and the claim's ``{-wait_ms}``.
"""
