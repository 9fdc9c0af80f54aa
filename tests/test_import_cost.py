"""``import echomq`` is on the start-up path of every producer and worker: it loads the
connection alone, and each public name loads its home module on first use, so a producer
never pays for the worker, a worker never pays for the server launchers, and neither
compiles the admin verbs it does not call."""

from __future__ import annotations

import subprocess
import sys

import pytest

import echomq
from tests.support import ROOT

REPORT = ("import atexit, sys; atexit.register(lambda: print('LOADED', "
          "sorted(m for m in sys.modules if m.startswith('echomq'))))")


def loaded_after(code: str) -> set[str]:
    """The echomq modules a fresh interpreter holds after running ``code``."""
    done = subprocess.run([sys.executable, "-c", f"{REPORT}\n{code}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("LOADED")]
    assert line, done.stdout + done.stderr
    return set(eval(line[-1].removeprefix("LOADED ")))


def under(loaded: set[str], *packages: str) -> list[str]:
    return sorted(m for m in loaded if any(m == p or m.startswith(p + ".") for p in packages))


def test_import_echomq_loads_the_connection_and_nothing_it_does_not_use() -> None:
    loaded = loaded_after("import echomq")
    assert "echomq.queue.connection" in loaded
    assert under(loaded, "echomq.worker", "echomq.jobs", "echomq.servers",
                 "echomq.queue.transitions", "echomq.models", "echomq.queue.sentinel") == []


def test_a_producer_does_not_load_the_worker_or_the_launchers() -> None:
    loaded = loaded_after("import echomq\necho = echomq.add_many")
    assert "echomq.queue.enqueue" in loaded
    assert under(loaded, "echomq.worker", "echomq.servers", "echomq.queue.listing",
                 "echomq.queue.retention") == []


def test_a_worker_does_not_load_the_launchers_or_the_admin_verbs() -> None:
    loaded = loaded_after("import echomq\nC = echomq.Consumer")
    assert "echomq.worker.consumer" in loaded
    assert under(loaded, "echomq.servers", "echomq.queue.listing", "echomq.queue.retention",
                 "echomq.queue.directory", "echomq.queue.bulk", "echomq.records",
                 "echomq.queue.workers") == []


def test_a_plain_consumers_start_loads_only_what_it_uses() -> None:
    """What the peers' harness times (spawn to ready): a plain Consumer built on a URL
    connection loads no read-side record, no Sentinel, no flow, no operator's steering, no
    cron fire and no retry policy (each is loaded by the call that needs it)."""
    loaded = loaded_after(
        "import echomq\nfrom echomq.worker.consumer import Consumer\n"
        "Consumer(echomq.connect('redis://127.0.0.1:1/0', check=False), 'q', print)")
    assert "echomq.worker.consumer" in loaded
    assert under(loaded, "echomq.records", "echomq.queue.workers", "echomq.queue.sentinel",
                 "echomq.queue.transitions.steering", "echomq.queue.flows",
                 "echomq.queue.flows_across", "echomq.queue.transitions.flows",
                 "echomq.queue.transitions.cron_specs", "echomq.worker.retry") == []


@pytest.mark.parametrize("name", sorted(echomq.__all__))
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(echomq, name) is not None
    assert name in dir(echomq) or name in vars(echomq)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        echomq.nope  # noqa: B018
