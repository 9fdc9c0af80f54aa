"""The Workers and Schedules pages in a real browser (issue 26, items 4 and 5): a worker
process shown alive, then gone after a kill -9 with the job it held; a cron schedule
paused from its row; a schedule action refused without the CSRF token; names that hold
markup shown as text. Headless Chromium against ``emq dashboard``, as in test_browser.py
(whose fixtures these reuse: one dashboard and one browser for this module)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from typing import Any

import echomq
from echomq.queue.connection import Connection
from tests.support import ROOT
from tests.support.waits import wait_until
from tests.web.test_browser import (  # noqa: F401 - fixtures
    base,
    browser,
    floor_path,
    no_alert,
    shot,
    text_of,
    wait_for,
)


def test_a_worker_is_shown_alive_then_gone_after_a_kill_9(
        browser: Any, base: str, rconn: Connection, server_url: str) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    queue = f"mailer-{uuid.uuid4().hex[:6]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq", "--url", server_url, "--log-level", "WARNING",
         "worker", "tests.support.workers:sleepy", "--queue", queue, "--lease", "400ms",
         "--auto-extend", "--concurrency", "2"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        echomq.add(rconn, queue, {"to": "a@example.com"}, job_id="welcome-1")
        wait_until(lambda: any(w.held_count for w in echomq.workers(rconn, queue)), 20)
        browser.get(f"{base}/workers?queue={queue}")
        row = f'#workers tr[data-worker^="{os.uname().nodename}"]'
        found = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, row))
        assert found.get_attribute("class") == "alive"
        assert str(proc.pid) in found.text and "welcome-1" in found.text
        shot(browser, "workers.png")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        # no reload: the rows refresh on their own, and the worker turns gone
        wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, row).get_attribute(
            "class") == "gone", timeout=15)
        gone = browser.find_element(By.CSS_SELECTOR, row)
        assert "gone" in gone.text and "welcome-1" in gone.text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_cron_schedule_is_paused_from_its_row(
        browser: Any, base: str, rconn: Connection) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    queue = f"reports-{uuid.uuid4().hex[:6]}"
    name = "<script>alert('nightly')</script>"
    echomq.schedule(rconn, queue, name, "0 3 * * *", {"report": True})
    try:
        browser.get(f"{base}/schedules")
        row = f'tr[data-schedule="{queue}/{name}"]'
        found = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, row))
        assert no_alert(browser) and name in found.text
        found.find_element(By.CSS_SELECTOR, "button.pause").click()
        wait_for(browser, lambda d: "paused schedule" in d.find_element(By.ID, "message").text)
        assert browser.find_element(By.CSS_SELECTOR, f"{row} .badge.paused").text == "paused"
        assert echomq.schedules(rconn, queue)[0].paused
        shot(browser, "schedules.png")
        resume = browser.find_element(By.CSS_SELECTOR, f"{row} button.resume")
        form = resume.find_element(By.XPATH, "./..")
        browser.execute_script("arguments[0].querySelector('input[name=csrf]').remove()", form)
        resume.click()
        wait_for(browser, lambda d: "missing or wrong CSRF token" in text_of(d))
        assert echomq.schedules(rconn, queue)[0].paused  # refused: still paused
    finally:
        echomq.unschedule(rconn, queue, name)
