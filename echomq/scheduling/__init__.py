"""What runs on a clock: cron schedules stored with their queue (``cron``, its arithmetic
in ``crontab``) and the batch scheduler that fires them and sweeps (``scheduler``).

Kept apart from ``echomq.jobs`` (the verbs on one job): these bring APScheduler, which a
producer or a worker never loads; ``import echomq`` loads them on first use of
``echomq.BatchScheduler`` or the cron verbs.
"""
