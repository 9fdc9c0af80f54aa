"""Fault injection: the driver is killed with SIGKILL at every crash point, in a child
process, and a rerun must converge to exactly one copy of every entry in the floor and
the remote, with nothing trimmed from the stream that is not in both."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from echomq.archive import CRASH_POINTS, Driver, Floor, S3Remote
from echomq.archive.stream_ids import id_key
from echomq.servers.seaweed import SeaweedS3
from tests.support.archive import floor_ids, folded_ids, remote_spec
from tests.support.recorder import Recorder

CHILD = str(Path(__file__).with_name("crash_child.py"))


def run_child(spec: dict[str, object], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, CHILD, json.dumps(spec)], capture_output=True,
                          text=True, timeout=timeout)


def remote_ids(remote: S3Remote, queue: str) -> set[str]:
    """Every id in any slice object (chain or not): what the remote holds at all."""
    held: set[str] = set()
    for ref in remote.list_slices(queue):
        held.update(item[0] for item in remote.get_slice(ref).items)
    return held


@pytest.mark.parametrize("at", [1, 2])
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill_9_at_every_crash_point_converges(point: str, at: int, rec: Recorder,
                                              server_url: str, seaweed: SeaweedS3,
                                              weed_remote: S3Remote, floor_path: Path) -> None:
    rec.add(40)
    rec.malformed()
    rec.add(9)
    written = rec.written_ids()
    spec = {"url": server_url, "floor": str(floor_path), "queue": rec.queue, "point": point,
            "at": at, "slice_count": 10, "lease_ms": 1_000,  # short: the rerun takes over soon
            "remote": remote_spec(weed_remote, seaweed)}
    child = run_child(spec)
    assert child.returncode == -9, child.stderr[-2000:]

    # After the crash: whatever left the stream is in the floor and in the remote.
    trimmed = set(written) - set(rec.stream_ids())
    with Floor(floor_path) as floor:
        assert trimmed <= set(floor_ids(floor, rec.queue))
    assert trimmed <= remote_ids(weed_remote, rec.queue)

    # The rerun converges: exactly one copy of everything, everywhere; the stream empty.
    report = Driver(rec.conn, floor_path, weed_remote, slice_count=10, wait_ms=5000).fold(
        rec.queue)
    assert report.error is None
    with Floor(floor_path) as floor:
        assert floor_ids(floor, rec.queue) == written
        status = floor.status(rec.queue)
        assert (status.entries + status.quarantined, status.pending) == (len(written), 0)
    assert folded_ids(weed_remote, rec.queue) == written
    assert sorted(remote_ids(weed_remote, rec.queue), key=id_key) == written  # no orphans
    manifest = weed_remote.read_manifest(rec.queue)
    assert manifest is not None and (manifest.head, manifest.entries) == (written[-1],
                                                                          len(written))
    assert rec.stream_ids() == []


def test_two_processes_with_their_own_floors(rec: Recorder, server_url: str,
                                             seaweed: SeaweedS3, weed_remote: S3Remote,
                                             tmp_path: Path) -> None:
    children = []
    for name in ("a", "b"):
        spec = {"url": server_url, "floor": str(tmp_path / name), "queue": rec.queue,
                "slice_count": 6, "seconds": 2.5, "remote": remote_spec(weed_remote, seaweed)}
        children.append(subprocess.Popen([sys.executable, CHILD, json.dumps(spec)],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True))
    for _ in range(40):
        rec.add(5)
        time.sleep(0.04)
    outputs = [child.communicate(timeout=60) for child in children]
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err[-2000:]
    folds = [json.loads(line) for out, _ in outputs for line in out.splitlines()
             if line.startswith("{")]
    assert sum(f["entries"] for f in folds) >= 1
    print("folds:", [(f["entries"], f["pulled"], f["uploaded"]) for f in folds if f["entries"]
                     or f["pulled"]])
    written = rec.written_ids()
    for name in ("a", "b"):  # one last fold each: both floors converge on the same history
        Driver(rec.conn, tmp_path / name, weed_remote, slice_count=6, wait_ms=5000).fold(
            rec.queue)
    for name in ("a", "b"):
        with Floor(tmp_path / name) as floor:
            assert floor_ids(floor, rec.queue) == written
    assert folded_ids(weed_remote, rec.queue) == written
    assert sorted(remote_ids(weed_remote, rec.queue), key=id_key) == written
