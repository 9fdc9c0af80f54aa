"""Restore, this code against another checkout of it, from one bucket (not a test).

A queue is folded once into the local SeaweedFS S3 endpoint; then it is restored into a
fresh floor by child processes that alternate between the two code trees (each one's
``echomq`` first on ``PYTHONPATH``), ``--rounds`` times each, so both see the same bucket
and the same load. Reported: each one's median rate, and its wall and CPU time (all of
the child's threads) per entry; CPU time moves less than the rate on a shared machine.

    git worktree add /tmp/before <commit> --detach
    python bench/bench_restore_ab.py /tmp/before [--entries 200000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench_archive import folded_bucket

HERE = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
from echomq.archive import Floor, S3Remote, restore
a = json.loads(sys.argv[1])
remote = S3Remote(a["bucket"], a["prefix"], endpoint_url=a["url"], region="us-east-1",
                  aws_access_key_id=a["key"], aws_secret_access_key=a["secret"])
remote.list_slices(a["queue"])
wall, cpu = time.perf_counter(), time.process_time()
with Floor(a["floor"], map_size=1 << 30) as floor:
    report = restore(remote, floor, [a["queue"]], progress=False)[a["queue"]]
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
n = report.entries + report.quarantined
print(json.dumps({"code": sys.modules["echomq.archive"].__file__, "rate": n / wall,
                  "wall": wall / n * 1e6, "cpu": cpu / n * 1e6}))
"""


def _restore_in_child(tree: Path, args: dict[str, str]) -> dict[str, Any]:
    """One restore by ``tree``'s code (run from a neutral folder: the current one would
    come first on ``sys.path``)."""
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)],
                          cwd=tempfile.gettempdir(), env=dict(os.environ, PYTHONPATH=str(tree)),
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the restore by {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    if not result["code"].startswith(str(tree)):
        raise SystemExit(f"{tree}: the child ran {result['code']}")
    return result


def compare(other: Path, entries: int, rounds: int) -> dict[str, list[dict[str, Any]]]:
    trees = {"this": HERE, "other": other.resolve()}
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as folder:
        work = Path(folder)
        with folded_bucket(work, entries) as (weed, _, queue, _):
            for n in range(rounds):
                order = list(trees) if n % 2 == 0 else list(reversed(trees))
                for name in order:
                    args = {"bucket": "bench", "prefix": queue, "url": weed.endpoint_url,
                            "key": weed.access_key, "secret": weed.secret_key,
                            "queue": queue, "floor": str(work / f"floor-{uuid.uuid4().hex}")}
                    out[name].append(_restore_in_child(trees[name], args))
                    last = out[name][-1]
                    print(f"{name}: {last['rate']:,.0f}/s, {last['cpu']:.2f} µs CPU per entry",
                          flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout's root folder")
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    for name, results in compare(args.other, args.entries, args.rounds).items():
        print(f"{name}: median {statistics.median(r['rate'] for r in results):,.0f} entries/s, "
              f"wall {statistics.median(r['wall'] for r in results):.2f} µs, "
              f"CPU {statistics.median(r['cpu'] for r in results):.2f} µs per entry")


if __name__ == "__main__":
    main()
