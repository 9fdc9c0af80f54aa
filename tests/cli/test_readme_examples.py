"""Every Python block of the README and of every docs/ page runs as written, in order, one
namespace a page (each page sets up what its blocks use), and every link between the pages
leads somewhere.

The blocks run against a private Valkey (``EMQ_URL``) and the suite's SeaweedFS (the
``EMQ_S3_*`` variables and the boto3 credentials chain), from a scratch folder, exactly as a
user would paste them. A block that calls ``.run()`` on a Consumer runs on a thread until
the queue has nothing left to do; then the Consumer is stopped as a signal would stop it.
(It lives beside the archive tests because the README's archive block needs their S3.)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import echomq
from echomq.servers.seaweed import SeaweedS3
from echomq.servers.valkey import EmbeddedValkey
from tests.support import ROOT
from tests.support.archive import bucket_name, remote_on

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
"""The guide's pages by concern (issue 21): what the README was before it became the pitch."""


def python_blocks(page: Path = README) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


@pytest.fixture
def readme_env(tmp_path: Path, private_server: EmbeddedValkey, seaweed: SeaweedS3,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    bucket = bucket_name()
    remote_on(seaweed, bucket, create_bucket=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EMQ_URL", private_server.url)
    monkeypatch.setenv("EMQ_S3_BUCKET", bucket)
    monkeypatch.setenv("EMQ_S3_ENDPOINT_URL", seaweed.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweed.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweed.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    yield private_server.url


def run_until_idle(block: str, namespace: dict[str, Any]) -> None:
    """Run a block that ends in ``consumer.run()``; stop it once its queue is idle."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            exec(block, namespace)
        except BaseException as exc:  # surfaced in the test below
            errors.append(exc)

    for earlier in ("consumer", "worker"):  # an earlier block's, stopped already
        namespace.pop(earlier, None)
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not errors:
        running = namespace.get("consumer") or namespace.get("worker")
        consumer = getattr(running, "consumer", running)  # an App's worker has one
        if isinstance(consumer, echomq.Consumer) and all(
                idle(echomq.counts(consumer.conn, queue)) for queue in consumer.queues):
            consumer.stop()
            break
        time.sleep(0.05)
    thread.join(timeout=30)
    assert not errors, f"block raised: {errors[0]!r}"
    assert not thread.is_alive(), "the page's Consumer did not stop"


def idle(counts: echomq.Counts) -> bool:
    """Nothing left to run on a queue that ran something."""
    return counts.pending == counts.active == counts.scheduled == 0 and (
        counts.completed + counts.dead > 0)


def run_page(page: Path) -> dict[str, Any]:
    """Run ``page``'s Python blocks in order in one namespace, as a reader pastes them."""
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    for block in python_blocks(page):
        if re.search(r"^\w+\.run\(\)", block, flags=re.M):
            run_until_idle(block, namespace)
        else:
            exec(block, namespace)
    return namespace


def test_the_readme_has_python_blocks() -> None:
    assert len(python_blocks()) >= 2


def test_every_python_block_of_the_readme_runs_as_written(readme_env: str) -> None:
    namespace = run_page(README)
    conn = echomq.connect(readme_env)
    c = echomq.counts(conn, "mail")
    assert (c.pending, c.active, c.dead, c.completed) == (0, 0, 1, 3)  # a task Fail, a cancel
    assert echomq.counts(conn, "high").completed == 1  # the App's ping
    restored = echomq.archive.Floor(".echomq/restored")
    assert len(restored.history("mail", namespace["ids"][0])) == 1
    conn.close()


def test_the_guide_pages_have_python_blocks() -> None:
    """The pages whose examples the README held before issue 21 split it by concern."""
    with_blocks = {page.name for page in DOCS if python_blocks(page)}
    assert {"using.md", "operating.md", "archive.md", "dashboard.md", "cluster.md"} <= with_blocks


@pytest.mark.parametrize("page", [p for p in DOCS if python_blocks(p)], ids=lambda p: p.name)
def test_every_python_block_of_every_docs_page_runs_as_written(page: Path, readme_env: str
                                                               ) -> None:
    namespace = run_page(page)
    if page.name == "archive.md":  # the page's own jobs, folded, then restored from the bucket
        restored = echomq.archive.Floor(".echomq/restored")
        assert len(restored.history("mail", namespace["ids"][0])) == 1


PAGES = [README, *sorted(ROOT.glob("*.md")), *DOCS, *sorted((ROOT / "infra").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    to hyphens (headings inside code blocks are comments, not headings)."""
    found: set[str] = set()
    fence = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (heading := re.match(r"#{1,6} (.*)", line)):
            text = heading.group(1).strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return [target for target in LINK.findall(text)
            if not re.match(r"[a-z]+:", target)]  # http:, https:, mailto: lead outside


def test_every_link_between_the_pages_resolves() -> None:
    """Issue 21: the README's sections moved to docs/; a link to a file that is not there
    or to a heading that is not on its page is a dead end (the README's own
    ``#counting-outcomes`` led nowhere before)."""
    broken = []
    for page in dict.fromkeys(PAGES):
        for target in links(page):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


QUICK_START = "## Quick start: three terminals"


def quick_start_blocks() -> list[tuple[str, str]]:
    """The quick start's (commands, expected output) pairs, in the README's order."""
    section = README.read_text().partition(QUICK_START)[2].partition("\n## ")[0]
    return re.findall(r"^```sh\n(.*?)^```\s*^```text\n(.*?)^```", section, flags=re.S | re.M)


def shown(text: str, folder: Path) -> str:
    """``text`` as the README shows it: its folder, times, ports and pids are the README's."""
    text = text.replace(str(folder), "/home/you/app")
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", "<time>", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    text = re.sub(r"^pid: \d+$", "pid: <pid>", text, flags=re.M)
    text = re.sub(r" in \d+\.\d{3}s$", " in <seconds>s", text, flags=re.M)
    return text.strip()


def test_the_three_terminal_quick_start_runs_as_shown(tmp_path: Path) -> None:
    """Issue 20, item 22: the server, a worker and a producer, each block run for real by
    bash in a fresh folder with this tree's ``emq``, each output as the README shows it."""
    blocks = quick_start_blocks()
    assert len(blocks) == 3, blocks
    (server, server_out), (worker, worker_out), (producer, producer_out) = blocks
    folder = tmp_path / "app"
    folder.mkdir()
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "emq").exists(), f"no emq script beside {sys.executable}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT))

    def bash(commands: str) -> str:
        done = subprocess.run(["bash", "-ec", commands], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    assert shown(bash(server), folder) == shown(server_out, folder)
    lines: list[str] = []
    running = subprocess.Popen(["bash", "-ec", worker], cwd=folder, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    reader = threading.Thread(target=lambda: lines.extend(running.stdout or ()), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any("consumer on queues high, mail" in ln for ln in lines):
            assert running.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        enqueue, status = [ln for ln in producer.splitlines()
                           if ln and not ln.startswith("#")]
        said = bash(enqueue)
        expected_worker = shown(worker_out, folder).splitlines()
        while len(lines) < len(expected_worker):  # the job ran: the worker said so
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        said += bash(status)
        assert shown(said, folder) == shown(producer_out, folder)
        assert shown("".join(lines), folder).splitlines() == expected_worker
    finally:
        os.killpg(running.pid, signal.SIGINT)  # Ctrl-C in terminal 2
        running.wait(30)
        reader.join(10)
        if running.stdout is not None:
            running.stdout.close()
        for extra in (["--yes"], []):  # `emq server stop` (--yes where it asks first)
            stop = subprocess.run(["emq", "server", "stop", *extra], cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=60)
            if stop.returncode != 2:
                break
    assert running.returncode == 0, "".join(lines)
    assert stop.returncode == 0, stop.stdout + stop.stderr
