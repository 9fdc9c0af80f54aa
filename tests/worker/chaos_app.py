"""The App of the chaos soak's process run (tests/worker/test_chaos_soak.py).

``emq --url URL worker tests.worker.chaos_app:app --processes 3 --record`` runs it; the
queue and the run-log folder come from ``$EMQ_CHAOS_QUEUE`` and ``$EMQ_CHAOS_LOGS``.
Each run writes the lines of ``tests/worker/chaos_worker.py`` (``job attempts pid run
<time> <lease left>`` before, ``... done <time>`` after) to its child's own log, one
unbuffered ``write`` per line, so a ``kill -9`` loses no line the kernel took.

A job whose payload says ``hang`` blocks in C on its first attempt, far past its
timeout: the child gives its slot back at timeout plus grace and the job is retried
(``timeout after 0.5 s (abandoned)``); its second attempt runs like any other.
"""

from __future__ import annotations

import os
import time

import echomq
from tests.worker.chaos_worker import lease_left

QUEUE = os.environ.get("EMQ_CHAOS_QUEUE", "chaos")
TIMEOUT_S = 0.5
GRACE_S = 0.5

app = echomq.App()
_log: dict[int, int] = {}


def note(job: echomq.JobContext, phase: str, *extra: str) -> None:
    pid = os.getpid()
    if pid not in _log:
        _log[pid] = os.open(os.path.join(os.environ["EMQ_CHAOS_LOGS"], f"runs-{pid}.log"),
                            os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    line = " ".join([job.id, str(job.attempts), str(pid), phase, f"{time.time():.6f}", *extra])
    os.write(_log[pid], line.encode() + b"\n")


@app.task(queue=QUEUE, name="chaos.run", max_attempts=5, backoff=echomq.Fixed(10),
          timeout_s=TIMEOUT_S, timeout_grace_s=GRACE_S)
def run(n: int, ms: int, hang: bool = False) -> dict[str, int]:
    """Sleeps the job's own duration; a ``hang`` job's first attempt sleeps an hour."""
    job = echomq.current_job()
    assert job is not None
    note(job, "run", lease_left(app.conn, app.conn.keys(QUEUE), job))
    time.sleep(3600 if hang and job.attempts == 1 else ms / 1000)
    note(job, "done")
    return {"n": n}
