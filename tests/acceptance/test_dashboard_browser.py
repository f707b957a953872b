"""The dashboard in a real browser: Debian's headless Chromium driven by Selenium through
Debian's chromium-driver, against uvicorn serving the app on a real PostgreSQL. Every
page loads, the overview refreshes itself, filters work, and every action (confirmed in
the browser's dialog: retry, cancel, delete, all matching, pause, resume, queue limits)
is checked in the database afterwards.

``.ci/run`` installs chromium and chromium-driver when they are missing; without them
the test is skipped outside CI and fails in it. With ``$PGQUEUE_DASHBOARD_SCREENSHOTS``
set to a folder, the main pages are saved there as PNG (docs/images holds the README's).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from pgqueue import ops
from pgqueue.dashboard import DashboardConfig, create_app
from tests.dashboard_support import Conn, add_job, state_of

pytestmark = pytest.mark.slow
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    if CHROMIUM is None or DRIVER is None:
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver are missing: .ci/run installs them (apt-get)")
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(dsn: str) -> Iterator[str]:
    """The dashboard on uvicorn in a thread; its base URL."""
    app = create_app(DashboardConfig(dsn=dsn, show_args=True, refresh_seconds=1, batch_size=2, page_size=20))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped"
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def seed(conn: Conn) -> dict[str, Any]:
    """A queue system in motion: jobs finished over the last half hour, failures, workers, cron."""
    conn.execute(
        "INSERT INTO pgqueue.jobs (queue, task, state, attempt, max_attempts, args, created_at, started_at,"
        " finished_at, errors)"
        " SELECT q, t, st, 1, 3, jsonb_build_object('n', g), f - interval '2 seconds', f - interval '1 second', f,"
        "  CASE WHEN st = 'discarded' THEN jsonb_build_array(jsonb_build_object('attempt', 1, 'type',"
        "   'builtins.TimeoutError', 'message', 'upstream did not answer', 'at', f)) ELSE '[]'::jsonb END"
        " FROM generate_series(1, 1500) AS g,"
        " LATERAL (SELECT (ARRAY['images', 'mail', 'reports'])[1 + g % 3] AS q,"
        "  (ARRAY['app.resize', 'app.send_mail', 'app.build_report'])[1 + g % 3] AS t,"
        "  now() - make_interval(secs => 1800 * power(g / 1500.0, 0.8) + 40 * sin(g / 30.0)) AS f,"
        "  (CASE WHEN g % 23 = 0 OR (g BETWEEN 700 AND 760 AND g % 3 = 0) THEN 'discarded' ELSE 'completed' END)"
        "   ::pgqueue.job_state AS st) AS x"
    )
    for i in range(40):
        add_job(conn, state="available", queue=("images", "mail")[i % 2], task="app.resize", args={"image": i})
    for _ in range(6):
        add_job(conn, state="running", queue="images", task="app.resize", worker_id="box-1:4242")
    flaky = [
        add_job(
            conn,
            state="discarded",
            queue="reports",
            task="app.flaky",
            args={"report": "q4"},
            errors=[
                {
                    "attempt": 1,
                    "type": "builtins.ConnectionError",
                    "message": "database went away",
                    "traceback": 'Traceback (most recent call last):\n  File "app.py", line 12, in flaky\n'
                    "ConnectionError: database went away",
                    "worker": "box-1:4242",
                    "at": "2026-12-02T09:00:00+00:00",
                }
            ],
        )
        for _ in range(5)
    ]
    conn.execute(
        "INSERT INTO pgqueue.worker_registry (worker_id, host, pid, queues, concurrency, in_flight, started_at,"
        " last_heartbeat, expires_at, listener_connected, version) VALUES"
        " ('box-1:4242', 'box-1', 4242, ARRAY['images','mail','reports'], 16, 6, now() - interval '2 hours',"
        "  now(), now() + interval '30 seconds', true, '0.1.0'),"
        " ('box-2:977', 'box-2', 977, ARRAY['reports'], 4, 0, now() - interval '1 hour', now() - interval '5 seconds',"
        "  now() + interval '25 seconds', true, '0.1.0')"
    )
    conn.execute(
        "INSERT INTO pgqueue.cron_schedules (name, task, cron, timezone, queue, priority, missed, max_catchup,"
        " grace_seconds, last_seen_at, created_at, defined_at, last_tick) VALUES"
        " ('nightly-report', 'app.build_report', '0 3 * * *', 'Europe/Paris', 'reports', 0, 'latest', 1, 60, now(),"
        "  now(), now(), date_trunc('day', now()) + interval '2 hours'),"
        " ('cleanup', 'app.cleanup', '*/5 * * * *', 'UTC', 'default', 0, 'skip', 1, 60,"
        "  now() - interval '3 days', now(), now(), NULL)"
    )
    ops.add_queue(conn, "pgqueue", "mail")
    ops.add_queue(conn, "pgqueue", "images")
    ops.set_queue_limits(conn, "pgqueue", "images", concurrency=8)
    return {"flaky": flaky}


def wait(driver: WebDriver, what: Callable[[WebDriver], Any], timeout: float = 15) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(what)


def accept_confirm(driver: WebDriver) -> None:
    wait(driver, lambda d: d.switch_to.alert).accept()


def shoot(driver: WebDriver, name: str) -> None:
    folder = os.environ.get("PGQUEUE_DASHBOARD_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def test_every_page_filter_and_action_in_a_browser(browser: WebDriver, served: str, conn: Conn) -> None:
    data = seed(conn)
    driver = browser

    # Every page loads with its own content, and htmx and the stylesheet come from the app.
    for path, marker in [
        ("/", "queues"),
        ("/jobs", "jobs"),
        ("/failures", "failures"),
        ("/cron", "cron"),
        ("/workers", "workers"),
        ("/queues", "controls"),
        (f"/jobs/{data['flaky'][0]}", "args"),
    ]:
        driver.get(served + path)
        assert driver.find_element(By.ID, marker).is_displayed(), path
    assert driver.execute_script("return typeof htmx") == "object"
    assert driver.execute_script("return getComputedStyle(document.body).margin") == "0px"
    shoot(driver, "job")

    # The overview refreshes itself: a job in a new queue appears without a reload.
    driver.get(served + "/")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-queue="mail"]'))
    shoot(driver, "overview")
    add_job(conn, state="available", queue="fresh")
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-queue="fresh"]'))

    driver.get(served + "/failures")
    assert "database went away" in driver.find_element(By.ID, "failures").text
    shoot(driver, "failures")
    driver.get(served + "/workers")
    assert "box-2" in driver.find_element(By.ID, "workers").text
    driver.get(served + "/cron")
    assert "inactive" in driver.find_element(By.ID, "cron").text
    shoot(driver, "cron")

    # Filter: state and task through the form.
    driver.get(served + "/jobs")
    shoot(driver, "jobs")
    Select(driver.find_element(By.ID, "f-state")).select_by_value("discarded")
    driver.find_element(By.ID, "f-task").send_keys("app.flaky")
    driver.find_element(By.ID, "f-apply").click()
    wait(driver, lambda d: "task=app.flaky" in d.current_url)
    rows = driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr[data-id]")
    assert sorted(int(r.get_attribute("data-id") or 0) for r in rows) == sorted(data["flaky"])
    # Text in errors, through the URL the form builds.
    driver.find_element(By.ID, "f-task").clear()
    driver.find_element(By.ID, "f-text").send_keys("went away")
    driver.find_element(By.ID, "f-apply").click()
    wait(driver, lambda d: "text=went+away" in d.current_url)
    assert len(driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr[data-id]")) == 5

    # Retry one job from its page.
    one = data["flaky"][0]
    driver.get(f"{served}/jobs/{one}")
    driver.find_element(By.ID, "job-retry").click()
    accept_confirm(driver)
    wait(driver, lambda d: d.find_elements(By.ID, "flash"))
    assert state_of(conn, one) == "available"

    # Cancel a selection.
    driver.get(served + "/jobs?state=available&queue=mail")
    boxes = driver.find_elements(By.CSS_SELECTOR, "input[name=ids]")[:3]
    chosen = [int(b.get_attribute("value") or 0) for b in boxes]
    for box in boxes:
        box.click()
    driver.find_element(By.ID, "sel-cancel").click()
    accept_confirm(driver)
    wait(driver, lambda d: d.find_elements(By.ID, "flash"))
    assert {state_of(conn, j) for j in chosen} == {"cancelled"}

    # Delete one finished job.
    driver.get(served + f"/jobs/{chosen[0]}")
    driver.find_element(By.ID, "job-delete").click()
    accept_confirm(driver)
    wait(driver, lambda d: d.find_elements(By.ID, "flash"))
    assert state_of(conn, chosen[0]) is None

    # Retry all matching the filter: batches of 2, progress until done.
    driver.get(served + "/jobs?state=discarded&task=app.flaky")
    driver.find_element(By.ID, "all-retry").click()
    accept_confirm(driver)
    try:
        wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '#bulk-progress[data-done="yes"]'), timeout=30)
    except TimeoutException:
        pytest.fail("bulk retry did not finish: " + driver.find_element(By.ID, "bulk").text)
    assert "4 changed of 4" in driver.find_element(By.ID, "bulk-progress").text
    assert {state_of(conn, j) for j in data["flaky"]} == {"available"}

    # Pause and resume a queue, set a limit.
    driver.get(served + "/queues")
    shoot(driver, "queues")
    driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"] button.pause').click()
    accept_confirm(driver)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-queue="mail"] button.resume'))
    assert {c.queue: c.paused for c in ops.queue_controls(conn, "pgqueue")}["mail"] is True
    # Set its limits: open the form, type, confirm; the database has them.
    driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"] details.limits summary').click()

    def type_into(name: str, text: str) -> None:
        field = driver.find_element(By.CSS_SELECTOR, f'tr[data-queue="mail"] form.limits input[name={name}]')
        field.clear()
        field.send_keys(text)

    for name, text in (
        ("concurrency", "5"),
        ("rate_limit", "100"),
        ("rate_period", "1m"),
        ("key_concurrency", "1"),
        ("key_rate_limit", "3"),
        ("key_rate_period", "2s"),
    ):
        type_into(name, text)
    driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"] form.limits input[type=checkbox]').click()
    driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"] button.limit').click()
    accept_confirm(driver)
    wait(driver, lambda d: any("rate 100 per 1m" in f.text for f in d.find_elements(By.ID, "flash")))
    control = {c.queue: c for c in ops.queue_controls(conn, "pgqueue")}["mail"]
    assert (control.concurrency, control.rate_limit, control.rate_period_seconds) == (5, 100, 60.0)
    assert (control.key_concurrency, control.key_fifo) == (1, True)
    assert (control.key_rate_limit, control.key_rate_period_seconds) == (3, 2.0)
    assert "100 per 1m" in driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"] td.limit-rate').text
    # A zero period is refused with a clear message, and nothing changes.
    driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"] details.limits summary').click()
    type_into("concurrency", "9")
    type_into("rate_period", "0s")
    driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"] button.limit').click()
    accept_confirm(driver)
    wait(driver, lambda d: d.find_elements(By.ID, "error"))
    assert "rate period: give a length of time longer than zero" in driver.find_element(By.ID, "error").text
    assert {c.queue: c for c in ops.queue_controls(conn, "pgqueue")}["mail"] == control
    driver.get(served + "/queues")
    driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="mail"] button.resume').click()
    accept_confirm(driver)
    wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-queue="mail"] button.pause'))
    control = {c.queue: c for c in ops.queue_controls(conn, "pgqueue")}["mail"]
    assert (control.paused, control.concurrency) == (False, 5)
