"""One worker process of the chaos soak (tests/test_chaos_soak.py).

``python -m tests.chaos_worker URL QUEUE EXECUTOR LOG_DIR LEASE_MS CONCURRENCY`` runs a
recording Consumer until SIGTERM (or until the soak kills it with SIGKILL). Every handler
run appends ``job_id attempts pid run <time>`` to this process's own log before it sleeps
and ``... done <time>`` after, with one unbuffered ``write`` per line, so a ``kill -9``
never loses a line the kernel took: the soak counts every run, even a killed one.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

import echomq


def consumer_class() -> Any:
    """``echomq.Consumer`` once it is exported (issue 8, item 6); its home until then."""
    found = getattr(echomq, "Consumer", None)
    if found is None:
        from echomq.jobs.consumer import Consumer as found
    return found


def main() -> None:
    url, queue, executor, log_dir, lease_ms, concurrency = sys.argv[1:7]
    pid = os.getpid()
    logging.basicConfig(filename=os.path.join(log_dir, f"worker-{pid}.log"), level=logging.INFO,
                        format="%(asctime)s %(threadName)s %(levelname)s %(name)s: %(message)s")
    fd = os.open(os.path.join(log_dir, f"runs-{pid}.log"),
                 os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(job: Any, phase: str) -> None:
        os.write(fd, f"{job.id} {job.attempts} {pid} {phase} {time.time():.6f}\n".encode())

    def handler(job: Any) -> dict[str, int]:
        """Sleeps the job's own duration (fixed by the producer, so a re-run takes as long)."""
        note(job, "run")
        time.sleep(job.payload["ms"] / 1000)
        note(job, "done")
        return {"n": job.payload["n"]}

    conn = echomq.connect(url, executor=executor)  # type: ignore[arg-type]
    consumer = consumer_class()(conn, queue, handler, concurrency=int(concurrency),
                                lease_ms=int(lease_ms), record=True, recovery="reap")
    consumer.run()


if __name__ == "__main__":
    main()
