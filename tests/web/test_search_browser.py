"""The search page in real Chromium (the dashboard's browser fixtures of
``test_browser``): a search by payload, sent by htmx, finds its job and shows the
payload as text."""

from __future__ import annotations

import uuid
from typing import Any

import echomq
from echomq.queue.connection import Connection
from tests.web import test_browser
from tests.web.test_browser import no_alert, shot, wait_for

floor_path = test_browser.floor_path
base = test_browser.base
browser = test_browser.browser


def test_a_search_by_payload_finds_a_job(browser: Any, base: str, rconn: Connection) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    queue = f"orders-{uuid.uuid4().hex[:6]}"
    echomq.add_many(rconn, queue, [{"order": i, "email": f"u{i}@example.com"}
                                   for i in range(300)])
    target = echomq.add(rconn, queue, {"order": "x", "email": "<b>vip</b>@example.com"})
    echomq.add_many(rconn, queue, [{"order": i} for i in range(300, 400)])
    browser.get(base + "/")
    browser.find_element(By.ID, "nav-search").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "search-form"))
    browser.find_element(By.ID, "search-queue").send_keys(queue)
    Select(browser.find_element(By.ID, "search-state")).select_by_value("pending")
    browser.find_element(By.ID, "search-payload").send_keys("<b>vip</b>")
    browser.find_element(By.ID, "search-submit").click()
    row = wait_for(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, f'#search-hits tr[data-job="{target}"]'))
    assert "<b>vip</b>@example.com" in row.text and no_alert(browser)
    assert browser.current_url == base + "/search"  # htmx swapped the results in
    assert len(browser.find_elements(By.CSS_SELECTOR, "#search-hits tr[data-job]")) == 1
    assert "scanned 401 of 401 jobs in pending" in \
        browser.find_element(By.ID, "search-scanned").text
    shot(browser, "search.png")
    row.find_element(By.TAG_NAME, "a").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "job-state"))
    assert "<b>vip</b>@example.com" in browser.find_element(By.ID, "payload").text
