"""One worker process of the chaos soak (tests/worker/test_chaos_soak.py).

``python -m tests.worker.chaos_worker URL QUEUE EXECUTOR LOG_DIR LEASE_MS CONCURRENCY`` runs a
recording Consumer until SIGTERM (or until the soak kills it with SIGKILL). Every handler
run appends ``job_id attempts pid run <time> <lease left>`` to this process's own log
before it sleeps and ``job_id attempts pid done <time>`` after, with one unbuffered
``write`` per line, so a ``kill -9`` never loses a line the kernel took: the soak counts
every run, even a killed one. ``lease left`` is the job's lease (its active score) minus
the server clock when the handler started, in ms, or ``lost`` when the job was no longer
this holder's: a diagnosis for any job that runs twice.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import redis

import echomq
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys


def lease_left(conn: Connection, keys: Keys, job: Any) -> str:
    """How long this holder's lease had left when its handler started (one read)."""
    pipe = conn.redis.pipeline(transaction=False)
    pipe.time()
    pipe.zscore(keys.active, job.id)
    pipe.hget(keys.job(job.id), "attempts")
    try:
        (secs, micros), score, attempts = pipe.execute()
    except redis.RedisError:
        return "unknown"
    if score is None or attempts != str(job.attempts):
        return "lost"
    return str(int(score) - (int(secs) * 1000 + int(micros) // 1000))


def connect(url: str, executor: str) -> Connection:
    """Connect, waiting out a server restart the way a supervisor's retry would."""
    deadline = time.monotonic() + 15
    while True:
        try:
            return echomq.connect(url, executor=executor)  # type: ignore[arg-type]
        except echomq.ConnectionFailed:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> None:
    url, queue, executor, log_dir, lease_ms, concurrency = sys.argv[1:7]
    pid = os.getpid()
    logging.basicConfig(filename=os.path.join(log_dir, f"worker-{pid}.log"), level=logging.INFO,
                        format="%(asctime)s %(threadName)s %(levelname)s %(name)s: %(message)s")
    fd = os.open(os.path.join(log_dir, f"runs-{pid}.log"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    conn = connect(url, executor)
    keys = Keys(queue)

    def note(job: Any, phase: str, *extra: str) -> None:
        line = " ".join([job.id, str(job.attempts), str(pid), phase, f"{time.time():.6f}",
                         *extra])
        os.write(fd, line.encode() + b"\n")

    def handler(job: Any) -> dict[str, int]:
        """Sleeps the job's own duration (fixed by the producer, so a re-run takes as long)."""
        note(job, "run", lease_left(conn, keys, job))
        time.sleep(job.payload["ms"] / 1000)
        note(job, "done")
        return {"n": job.payload["n"]}

    consumer = echomq.Consumer(conn, queue, handler, concurrency=int(concurrency),
                               lease_ms=int(lease_ms), record=True, recovery="reap")
    consumer.run()


if __name__ == "__main__":
    main()
