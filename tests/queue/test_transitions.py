"""One catalogue of transitions: the job's path builds its calls and reads its replies
through ``echomq.queue.transitions`` only, and each parser reads what its script answers."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import echomq
from echomq.queue.connection import Connection
from echomq.queue.keys import Keys
from echomq.queue.transitions import intake, leases, settles

ROOT = Path(echomq.__file__).parent
JOB_PATH = ("queue", "jobs", "scheduling", "worker", "archive")
"""The parts that run transitions: a job's trip, the operator's verbs, what runs on a clock,
and the archive's fold lease (its scripts are the archive's, its calls and replies the
catalogue's)."""

CATALOGUE = "queue/transitions/"
"""The catalogue's package: its modules by concern are the one place that names a script
or reads a reply code."""

_NAMED_CALL = re.compile(r"\.run\(\s*\"")
_HAND_READ = re.compile(r"int\((?:code|reply|codes)\b|\bcode\s*[!=<>]=?\s*-?\d")


def job_path_sources() -> dict[str, str]:
    found = {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for part in JOB_PATH for path in (ROOT / part).rglob("*.py")
    }
    assert len(found) > 15, "the scan must see the job's path"
    return found


def test_no_module_on_the_jobs_path_builds_a_transition_call_by_hand() -> None:
    hand_built = [name for name, text in job_path_sources().items()
                  if not name.startswith(CATALOGUE) and _NAMED_CALL.search(text)]
    assert hand_built == []


def test_no_module_on_the_jobs_path_reads_a_reply_code_by_hand() -> None:
    hand_read = [name for name, text in job_path_sources().items()
                 if not name.startswith(CATALOGUE) and name != "queue/replies.py"
                 and _HAND_READ.search(text)]
    assert hand_read == []


def test_the_fail_parser_reads_both_verdicts_from_the_script(conn: Connection,
                                                             queue: str) -> None:
    keys = Keys(queue)
    echomq.add(conn, queue, {}, max_attempts=2)
    verdicts = []
    for _ in range(2):
        (job,) = echomq.claim(conn, queue, lease_ms=5_000)
        call = settles.fail_call(keys, job.id, job.token, "boom", backoff_ms=1,
                                     backoff_cap_ms=1)
        verdicts.append(settles.failed(conn.executor.run(*call), job.id))
        time.sleep(0.02)  # past the 1 ms backoff
    assert verdicts == ["retrying", "dead"]


def test_the_extend_parser_names_a_collected_lease_as_lost(conn: Connection, queue: str) -> None:
    echomq.add(conn, queue, {})
    (job,) = echomq.claim(conn, queue, lease_ms=5_000)
    call = leases.extend_call(Keys(queue), job.id, job.token, 5_000)
    assert leases.extended(conn.executor.run(*call), job.id) is None
    echomq.complete(conn, queue, job.id, job.token, "ok")
    lost = leases.extended(conn.executor.run(*call), job.id)
    assert isinstance(lost, leases.LEASE_LOST)


@pytest.mark.parametrize("reply", [[], ["0"]])
def test_the_claim_parser_reads_an_empty_claim_as_no_jobs(reply: list[str]) -> None:
    assert intake.claimed(reply) == []


def test_a_settlement_is_an_immutable_record_by_name_and_position() -> None:
    """Built once for every job a Consumer settles, so it is a plain tuple; it still
    cannot be changed after it is made, and reads by field name."""
    from echomq.queue.transitions.settles import Settlement

    s = Settlement("7", 2, "completed", "null")
    assert (s.job_id, s.token, s.outcome, s.result) == ("7", 2, "completed", "null")
    assert s == Settlement(job_id="7", token=2, outcome="completed", result="null")
    with pytest.raises(AttributeError):
        s.token = 3  # type: ignore[misc]
