"""The dashboard in a real browser: headless Chromium (Debian's package) driven by
Selenium, against ``emq dashboard`` served by uvicorn in its own process, on a real Valkey
and a real floor. One browser and one server for the module.

The tests also take docs/dashboard.md's screenshots: into a temporary folder on every run (so a
test run leaves the checkout as it was), and into docs/screenshots/*.png with
``EMQ_SCREENSHOTS=1``, which is how the dashboard page's pictures are made. Without Chromium they
fail, naming the packages to install (``.ci/run`` installs them).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import echomq
from echomq.archive import Driver, Floor, declare
from echomq.queue.connection import Connection
from tests.support import ROOT
from tests.web.conftest import fill
from tests.web.served import dashboard, status

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHOTS = ROOT / "docs" / "screenshots"
if os.environ.get("EMQ_SCREENSHOTS") != "1":
    import tempfile

    SHOTS = Path(tempfile.mkdtemp(prefix="emq-screenshots-"))
TOKEN = "browser-test-token"


def _need_chromium() -> None:
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    pytest.fail("headless Chromium is missing: apt-get install chromium chromium-driver "
                "(.ci/run does it)")


@pytest.fixture(scope="module")
def floor_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("web-floor") / "floor"


@pytest.fixture(scope="module")
def base(server_url: str, floor_path: Path) -> Iterator[str]:
    """``emq dashboard`` with a token and a floor, on a free port; its URL."""
    _need_chromium()
    with dashboard(server_url, "--floor", str(floor_path),
                   env={"EMQ_DASHBOARD_TOKEN": TOKEN}) as served:
        yield served.url


@pytest.fixture(scope="module")
def browser(base: str) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--disable-gpu", "--window-size=1280,860"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.implicitly_wait(0)
    try:
        log_in(driver, base)
        yield driver
    finally:
        driver.quit()


def log_in(driver: Any, base: str, token: str = TOKEN) -> None:
    from selenium.webdriver.common.by import By

    driver.get(base + "/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login-submit").click()
    wait_for(driver, lambda d: d.execute_script("return document.readyState") == "complete"
             and not d.find_elements(By.ID, "login-submit") or d.find_elements(
                 By.ID, "login-failed"))


def wait_for(driver: Any, predicate: Any, timeout: float = 10.0) -> Any:
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException)).until(predicate)


def cells(driver: Any, selector: str) -> list[str]:
    """The texts of a table row's cells, read at once (htmx may swap the row any time)."""
    found = driver.execute_script(
        "const r = document.querySelector(arguments[0]);"
        "return r ? Array.from(r.cells, c => c.innerText.trim()) : [];", selector)
    return [str(c) for c in found]


def text_of(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


def no_alert(driver: Any) -> bool:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        driver.switch_to.alert  # noqa: B018 (the lookup raises when there is none)
    except NoAlertPresentException:
        return True
    return False


def shot(driver: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SHOTS / name)), f"no screenshot {name}"
    assert (SHOTS / name).stat().st_size > 1000


@pytest.fixture
def mail(rconn: Connection) -> str:
    """A queue with jobs in every state, one dead job whose error holds a script."""
    name = f"mail-{uuid.uuid4().hex[:6]}"
    fill(rconn, name, pending=4, payload={"to": "<script>alert('payload')</script>"},
         error="<script>alert('error')</script> SMTP 550")
    return name


def test_logging_in_with_the_token(browser: Any, base: str) -> None:
    from selenium.webdriver.common.by import By

    browser.delete_all_cookies()
    browser.get(base + "/")
    assert browser.current_url == base + "/login"
    log_in(browser, base, "wrong")
    assert wait_for(browser, lambda d: d.find_element(By.ID, "login-failed")).is_displayed()
    log_in(browser, base)
    wait_for(browser, lambda d: d.current_url == base + "/")
    assert "Queues" in text_of(browser)


def test_logging_out_ends_the_session_on_the_server(browser: Any, base: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(base + "/")
    before = browser.get_cookie("emq_session")["value"]
    assert status(base + "/", cookie=f"emq_session={before}") == 200
    browser.find_element(By.CSS_SELECTOR, "form[action='/logout'] button").click()
    wait_for(browser, lambda d: d.current_url == base + "/login")
    assert browser.get_cookie("emq_session") is None
    assert status(base + "/", cookie=f"emq_session={before}") == 401  # a copy is dead too
    log_in(browser, base)
    wait_for(browser, lambda d: d.current_url == base + "/")
    after = browser.get_cookie("emq_session")["value"]
    assert after != before and status(base + "/", cookie=f"emq_session={after}") == 200


def test_the_overview_shows_counts_and_refreshes_them(
        browser: Any, base: str, rconn: Connection, mail: str) -> None:
    from selenium.webdriver.common.by import By

    echomq.add_many(rconn, f"reports-{mail[-6:]}", [{"n": i} for i in range(7)])
    browser.get(f"{base}/?q={mail[-6:]}")  # the other tests' queues: on other pages
    row = f'tr[data-queue="{mail}"]'
    wait_for(browser, lambda d: cells(d, row))  # a new queue shows up within seconds
    assert cells(browser, row)[1:6] == ["4", "0", "1", "1", "1"]
    echomq.add(rconn, mail, {"late": True})  # no reload: htmx polls the counts
    wait_for(browser, lambda d: cells(d, row)[1] == "5")
    browser.get(f"{base}/?q={mail[-6:]}")  # loaded again: its pager and charts count the
    wait_for(browser, lambda d: cells(d, row))  # queues the scan found since
    assert "no queue" not in browser.find_element(By.ID, "queue-count").text
    shot(browser, "overview.png")


def test_a_queue_page_refreshes_its_list(
        browser: Any, base: str, rconn: Connection, mail: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{base}/queues/{mail}?state=pending")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#job-list tr[data-job]")) == 4
    echomq.add(rconn, mail, {"new": True}, job_id="fresh")
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-job="fresh"]'))
    assert browser.find_element(By.ID, "tab-pending").text == "pending 5"
    running = echomq.get_job(rconn, mail, "active-1")
    assert running is not None
    echomq.report_progress(rconn, mail, "active-1", running.attempts, {"done": 3, "of": 8})
    browser.get(f"{base}/queue?queue={mail}&state=active")
    bar = browser.find_element(By.CSS_SELECTOR, 'tr[data-job="active-1"] progress')
    assert bar.get_attribute("value") == "0.375"
    lease = browser.find_element(By.CSS_SELECTOR, 'tr[data-job="active-1"] td.lease time')
    assert lease.text.startswith("in ") and lease.get_attribute("title").endswith("Z")
    shot(browser, "queue.png")


def test_a_dead_job_shows_its_script_as_text_and_retries(
        browser: Any, base: str, rconn: Connection, mail: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{base}/queues/{mail}")
    browser.find_element(By.ID, "tab-dead").click()
    browser.find_element(By.LINK_TEXT, "dead-1").click()
    assert no_alert(browser)
    assert "<script>alert('error')</script> SMTP 550" in \
        browser.find_element(By.ID, "last-error").text
    assert "<script>alert('payload')</script>" in browser.find_element(By.ID, "payload").text
    shot(browser, "job.png")
    browser.find_element(By.CSS_SELECTOR, "button.retry").click()
    wait_for(browser, lambda d: d.find_element(By.ID, "job-state").text == "pending")
    assert "retried dead-1" in browser.find_element(By.ID, "message").text
    browser.get(f"{base}/queues/{mail}?state=pending")
    assert browser.find_elements(By.CSS_SELECTOR, 'tr[data-job="dead-1"]')
    assert echomq.counts(rconn, mail).dead == 0


def test_pausing_a_queue(browser: Any, base: str, rconn: Connection, mail: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{base}/queues/{mail}")
    browser.find_element(By.CSS_SELECTOR, "button.pause").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "paused"))
    assert echomq.is_paused(rconn, mail)
    browser.find_element(By.CSS_SELECTOR, "button.resume").click()
    wait_for(browser, lambda d: not d.find_elements(By.ID, "paused"))
    assert not echomq.is_paused(rconn, mail)


def test_an_action_without_the_csrf_token_is_refused(
        browser: Any, base: str, rconn: Connection, mail: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{base}/queues/{mail}?state=pending")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-job="p-0"]')
    form = row.find_element(By.TAG_NAME, "form")
    browser.execute_script(
        "arguments[0].querySelector('input[name=csrf]').remove()", form)
    form.find_element(By.TAG_NAME, "button").click()
    wait_for(browser, lambda d: "missing or wrong CSRF token" in text_of(d))
    assert echomq.get_job(rconn, mail, "p-0") is not None


def test_a_purged_job_is_found_in_the_archive(
        browser: Any, base: str, rconn: Connection, floor_path: Path) -> None:
    from selenium.webdriver.common.by import By

    queue = f"billing-{uuid.uuid4().hex[:6]}"
    declare(rconn, queue)
    fill(rconn, queue, pending=2, record=True, error="card declined")
    with Floor(floor_path) as floor:
        Driver(rconn, floor, claim_custody=True).fold(queue)
    echomq.purge(rconn, queue, "dead")
    assert echomq.get_job(rconn, queue, "dead-1") is None
    browser.get(base + "/archive")
    browser.find_element(By.ID, "audit-queue").send_keys(queue)
    browser.find_element(By.ID, "audit-job").send_keys("dead-1")
    browser.find_element(By.ID, "audit-submit").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "audit"))
    shot(browser, "archive.png")
    browser.find_element(By.CSS_SELECTOR, "#audit a").click()
    mark = wait_for(browser, lambda d: d.find_element(By.ID, "from-archive"))
    assert "From the archive" in mark.text
    assert "card declined" in browser.find_element(By.ID, "history").text


def test_an_action_on_a_path_like_id_stays_in_its_queue(
        browser: Any, base: str, rconn: Connection) -> None:
    """Issue 20, item 5: a browser resolves ``..`` in a path, so an id in a form's action
    path steered the action to another queue's job. The id and the queue travel in the
    form body: the Remove of ``uploads``'s job removes that one, and ``billing``'s job of
    the id the path would have named stays."""
    from selenium.webdriver.common.by import By

    tag = uuid.uuid4().hex[:6]
    uploads, billing = f"uploads-{tag}", f"billing-{tag}"
    odd = f"../../{billing}/jobs/invoice-42"
    echomq.add(rconn, uploads, {"n": "odd"}, job_id=odd)
    echomq.add(rconn, billing, {"n": "bill"}, job_id="invoice-42")
    echomq.add(rconn, billing, {"n": "bill"}, job_id=odd)
    browser.get(f"{base}/?q={uploads}")
    wait_for(browser, lambda d: d.find_element(By.LINK_TEXT, uploads)).click()
    row = wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#job-list tr[data-job]"))
    assert row.get_attribute("data-job") == odd
    row.find_element(By.CSS_SELECTOR, "button.danger").click()  # Remove, from the list
    wait_for(browser, lambda d: d.find_element(By.ID, "message").text
             == f"removed {odd} in {uploads}")
    assert echomq.get_job(rconn, uploads, odd) is None
    assert echomq.get_job(rconn, billing, "invoice-42") is not None
    assert echomq.get_job(rconn, billing, odd) is not None
    echomq.add(rconn, uploads, {"n": "odd"}, job_id=odd)  # and from the job's own page
    browser.refresh()
    wait_for(browser, lambda d: d.find_element(By.LINK_TEXT, odd)).click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "job-state"))
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Job {odd} in {uploads}"
    browser.find_element(By.CSS_SELECTOR, ".actions button.danger").click()
    message = wait_for(browser, lambda d: d.find_element(By.ID, "message")).text
    assert message == f"removed {odd} in {uploads}"
    assert echomq.get_job(rconn, uploads, odd) is None
    assert echomq.get_job(rconn, billing, "invoice-42") is not None
    assert echomq.get_job(rconn, billing, odd) is not None


def test_a_queue_named_like_a_path_opens_from_the_overview(
        browser: Any, base: str, rconn: Connection) -> None:
    """Issue 20, item 6: a queue name with ``/`` made the overview a 500; every name the
    key builder takes renders, and its link opens that queue (not the path it spells)."""
    from selenium.webdriver.common.by import By

    tag = uuid.uuid4().hex[:6]
    odd = f"{tag}/../x?y#z%2F"
    echomq.add(rconn, odd, {"n": 1}, job_id="only")
    echomq.add(rconn, "x", {"n": 1}, job_id=f"other-{tag}")
    browser.get(f"{base}/?q={tag}")
    wait_for(browser, lambda d: d.find_element(By.LINK_TEXT, odd)).click()
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#job-list tr[data-job]"))
    assert browser.find_element(By.CSS_SELECTOR, "h1 .name").text == odd
    rows = browser.find_elements(By.CSS_SELECTOR, "#job-list tr[data-job]")
    assert [r.get_attribute("data-job") for r in rows] == ["only"]


def test_a_replay_from_an_archived_job_creates_a_new_job(
        browser: Any, base: str, rconn: Connection, floor_path: Path) -> None:
    """Issue 26, item 6: the Replay button of a job only the floor remembers enqueues its
    recorded payload again (here on another queue) and opens the new job's page."""
    from selenium.webdriver.common.by import By

    queue = f"invoices-{uuid.uuid4().hex[:6]}"
    declare(rconn, queue, payload=True)
    fill(rconn, queue, pending=0, record=True, error="<b>card</b> declined",
         payload={"invoice": 42, "note": "<script>alert('replay')</script>"})
    with Floor(floor_path) as floor:
        Driver(rconn, floor, claim_custody=True).fold(queue)
    echomq.purge(rconn, queue, "dead")
    browser.get(f"{base}/job?queue={queue}&job=dead-1")
    wait_for(browser, lambda d: d.find_element(By.ID, "from-archive"))
    assert no_alert(browser)
    assert "<script>alert('replay')</script>" in browser.find_element(
        By.CSS_SELECTOR, "pre.payload").text
    shot(browser, "archived-job.png")
    target = browser.find_element(By.ID, "replay-queue")
    target.clear()
    target.send_keys(queue + "-again")
    browser.find_element(By.ID, "replay").click()
    message = wait_for(browser, lambda d: d.find_element(By.ID, "message")).text
    [new] = echomq.list_jobs(rconn, queue + "-again", "pending")
    assert message == f"replayed dead-1 of {queue} as {new.id} in {queue}-again"
    assert new.payload == {"invoice": 42, "note": "<script>alert('replay')</script>"}
    assert browser.find_element(By.ID, "job-replay-of").text == f"{queue}/dead-1"
    assert browser.find_element(By.ID, "job-state").text == "pending"


def test_a_replay_without_the_csrf_token_is_refused(
        browser: Any, base: str, rconn: Connection, floor_path: Path) -> None:
    from selenium.webdriver.common.by import By

    queue = f"refunds-{uuid.uuid4().hex[:6]}"
    declare(rconn, queue, payload=True)
    fill(rconn, queue, pending=0, record=True)
    with Floor(floor_path) as floor:
        Driver(rconn, floor, claim_custody=True).fold(queue)
    echomq.purge(rconn, queue, "dead")
    browser.get(f"{base}/job?queue={queue}&job=dead-1")
    form = wait_for(browser, lambda d: d.find_element(By.ID, "replay-form"))
    browser.execute_script("arguments[0].querySelector('input[name=csrf]').remove()", form)
    browser.find_element(By.ID, "replay").click()
    wait_for(browser, lambda d: "missing or wrong CSRF token" in text_of(d))
    assert echomq.counts(rconn, queue).pending == 0


def overflow(driver: Any) -> int:
    """How far the page is wider than the window (0: no horizontal scroll of the body)."""
    return int(driver.execute_script(
        "return document.documentElement.scrollWidth - window.innerWidth"))


def test_a_420_px_phone_shows_every_page_without_sideways_scrolling(
        browser: Any, base: str, rconn: Connection, mail: str) -> None:
    """Issue 26, item 7: wide tables scroll inside their own box; the page itself never
    scrolls sideways. Also select-all on the dead letters (a script file, the CSP allows
    no inline script), and the dark theme the system asks for."""
    from selenium.webdriver.common.by import By

    phone = f"phone-{uuid.uuid4().hex[:6]}"
    fill(rconn, phone, pending=0, error="a-very-long-error-" * 20)
    for i in range(3):  # more dead letters
        echomq.add(rconn, phone, {"n": i}, job_id=f"dead-x{i}", max_attempts=1)
        [held] = echomq.claim(rconn, phone)
        echomq.fail(rconn, phone, held.id, held.token, "x" * 300)
    echomq.add(rconn, mail, {"wait": True}, job_id="later", delay_ms=600_000)
    browser.set_window_size(420, 900)
    try:
        width = browser.execute_script("return window.innerWidth")
        assert 360 <= width <= 420, width
        for path in (f"/?q={phone}", f"/queue?queue={phone}&state=dead",
                     f"/queue?queue={phone}&state=active", f"/queue?queue={mail}&state=scheduled",
                     f"/job?queue={phone}&job=dead-1", "/archive"):
            browser.get(base + path)
            wait_for(browser, lambda d: d.execute_script(
                "return document.readyState") == "complete")
            assert overflow(browser) <= 0, (path, overflow(browser))
        browser.get(f"{base}/queue?queue={phone}&state=dead")
        boxes = browser.find_elements(By.CSS_SELECTOR, "input[name=ids]")
        assert len(boxes) == 4 and not any(b.is_selected() for b in boxes)
        browser.find_element(By.ID, "select-all").click()
        assert all(b.is_selected() for b in browser.find_elements(
            By.CSS_SELECTOR, "input[name=ids]"))
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {
            "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        background = browser.execute_script(
            "return getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(12, 17, 29)", background  # the dark --bg
        shot(browser, "phone-dark.png")
        browser.find_element(By.ID, "select-all").click()
        assert not any(b.is_selected() for b in browser.find_elements(
            By.CSS_SELECTOR, "input[name=ids]"))
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
        browser.set_window_size(1280, 860)
def test_a_chart_is_drawn_with_data(browser: Any, base: str, rconn: Connection) -> None:
    """Issue 26, item 1: the queue page draws its charts from the settle scripts'
    buckets (SVG from the server, no script), and the range switch redraws them."""
    from selenium.webdriver.common.by import By

    queue = f"charts-{uuid.uuid4().hex[:6]}"
    echomq.add_many(rconn, queue, [{"n": i} for i in range(12)])
    jobs = echomq.claim(rconn, queue, count=12, lease_ms=60_000)
    for job in jobs[:9]:
        echomq.complete(rconn, queue, job.id, job.token, {"ok": True})
    for job in jobs[9:]:
        echomq.fail(rconn, queue, job.id, job.token, "boom", delay_ms=60_000)
    browser.get(f"{base}/queue?queue={queue}")
    bars = wait_for(browser, lambda d: d.find_elements(
        By.CSS_SELECTOR, "svg#chart-finished g.bar rect.seg"))
    assert {b.get_attribute("class") for b in bars} == {"seg completed", "seg retried"}
    assert all(float(b.get_attribute("height")) > 0 for b in bars)
    assert browser.find_elements(By.CSS_SELECTOR, "svg#chart-run circle.dot")
    legend = browser.find_element(By.CSS_SELECTOR, "svg#chart-finished").text
    assert "completed" in legend and "failed, retried" in legend
    shot(browser, "charts.png")
    browser.find_element(By.ID, "range-week").click()
    wait_for(browser, lambda d: d.find_element(By.ID, "charts").get_attribute(
        "data-range") == "week")
    assert browser.find_elements(By.CSS_SELECTOR, "svg#chart-finished g.bar rect.seg")
