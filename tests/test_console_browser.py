"""The admin console in a real browser: Debian's chromium driven by Playwright, against a real coordinator
process with devices training through the real API over loopback.

The tests share one coordinator and one fleet (module scope) and run in file order; the login-throttle
test is last because it locks the loopback address out of logging in for a while.
Screenshots of every page at 1280 and 390 px go to $FLEET_SCREENSHOTS (docs/img when refreshing the
README's pictures) or a temporary directory.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from client import Worker, WorkerConfig
from sim.data import write_shards
from tests.processes import ENROLL, ServerProcess

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
USER, PASSWORD = "operator", "console-test-password"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists() and os.environ.get("CI") != "true", reason="no chromium"),
]
sync_api = pytest.importorskip("playwright.sync_api")


class Fleet:
    """A coordinator process with three training workers; their task reports are kept."""

    def __init__(self, tmp: Path) -> None:
        shards, test_path = write_shards(tmp / "data", devices=3, partition="iid", seed=3)
        self.server = ServerProcess(
            tmp / "server",
            eval_data=test_path,
            eval_every_versions=5,
            eval_interval_s=1,
            max_batch=32,
            time_slo_ms=300,
            console_user=USER,
            console_password=PASSWORD,
            login_rate_per_minute=0.5,  # a token every 2 min: a slow machine cannot outwait the throttle
        ).start()
        self.url = self.server.url
        self.stop = threading.Event()
        self.reports: list = []
        for i, shard in enumerate(shards):
            config = WorkerConfig(
                base_url=self.url, enrollment_key=ENROLL, data=shard, seed=i, device_model=f"Pixel {i}",
                backoff_initial=0.2, backoff_max=1.0, max_consecutive_errors=None, max_retry_after=1.0,
            )  # fmt: skip
            worker = Worker(config, on_report=self.reports.append)
            threading.Thread(target=worker.run, args=(self.stop,), daemon=True).start()

    def stats(self) -> dict:
        return self.server.admin("/v1/admin/stats").json()

    def wait(self, condition, timeout: float = 60.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}: {self.stats()}")

    def close(self) -> None:
        self.stop.set()
        self.server.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    running = Fleet(tmp_path_factory.mktemp("console"))
    try:
        running.wait(lambda: running.stats()["version"] >= 5, 90, "first versions")
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def page(browser, fleet: Fleet) -> Iterator[object]:
    """One logged-in tab (1280 px wide) for the tests that steer training."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=fleet.url)
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())  # every data-confirm form: yes
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(tab)
    yield tab
    context.close()
    assert not errors, errors  # no script error on any page the tests visited


def log_in(tab, password: str = PASSWORD) -> None:
    tab.goto("/admin/login")
    tab.fill("#username", USER)
    tab.fill("#password", password)
    tab.click("button[type=submit]")


def csrf_of(tab) -> str:
    return tab.locator('meta[name="csrf-token"]').get_attribute("content")


def test_anonymous_request_is_sent_to_the_login_page(fleet: Fleet):
    response = httpx.get(f"{fleet.url}/admin/devices", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/admin/login?next=/admin/devices"
    assert httpx.get(f"{fleet.url}/admin/data/overview.json").status_code == 401


def test_the_accuracy_chart_gains_points_while_devices_train(page, fleet: Fleet):
    page.goto("/admin")
    assert page.url.endswith("/admin")
    chart = page.locator('[data-chart="accuracy-versions"]')
    chart.locator(".main-svg").first.wait_for()  # plotly drew it
    first = int(chart.get_attribute("data-points"))
    version = int(page.locator('[data-field="version"]').inner_text())
    # no reload: the page's own script redraws the chart and refills the cards (the CSP forbids the
    # string-evaluating page.wait_for_function, so the test polls the DOM from here)
    fleet.wait(lambda: int(chart.get_attribute("data-points")) > first, 60, "new accuracy points")
    card = page.locator('[data-field="version"]')
    fleet.wait(lambda: int(card.inner_text()) > version, 30, "the version card to move")


def test_pause_and_resume_change_what_devices_get(page, fleet: Fleet):
    page.goto("/admin")
    page.get_by_role("button", name="Pause").click()
    page.wait_for_url(re.compile(r"msg=training"))
    assert page.locator('[data-field="status"]').inner_text().lower() == "paused"
    paused_at = fleet.stats()["rejections"].get("paused", 0)
    fleet.wait(lambda: fleet.stats()["rejections"].get("paused", 0) > paused_at + 2, 30, "paused rejections")
    version = fleet.stats()["version"]
    time.sleep(1.5)
    assert fleet.stats()["version"] <= version + 3  # only gradients in flight at the pause land
    page.get_by_role("button", name="Resume").click()
    page.wait_for_url(re.compile(r"msg=training"))
    fleet.wait(lambda: fleet.stats()["version"] > version + 3, 60, "training to resume")


def test_a_new_learning_rate_is_used_by_the_coordinator(page, fleet: Fleet):
    page.goto("/admin/settings")
    page.fill('[name="strategy.learning_rate"]', "0.0625")
    page.get_by_role("button", name="Apply and save").click()
    page.wait_for_url(re.compile(r"msg=saved"))
    assert fleet.stats()["strategy"]["learning_rate"] == pytest.approx(0.0625)
    page.goto("/admin/learning")
    assert "0.0625" in page.locator("table.kv").inner_text()
    page.goto("/admin/audit")
    assert "Learning rate γ from" in page.locator('tr[data-action="settings_changed"]').first.inner_text()


def test_invalid_settings_are_refused_and_nothing_changes(page, fleet: Fleet):
    page.goto("/admin/settings")
    page.fill('[name="strategy.learning_rate"]', "-1")
    page.get_by_role("button", name="Apply and save").click()
    assert page.locator(".flash.error").is_visible()
    assert fleet.stats()["strategy"]["learning_rate"] == pytest.approx(0.0625)


def test_promoting_an_older_version_is_what_devices_pull_next(page, fleet: Fleet):
    model_id = fleet.stats()["model_id"]
    page.goto("/admin/models")
    buttons = page.get_by_role("button", name=re.compile(f"Promote version \\d+ of {model_id}"))
    chosen = buttons.nth(buttons.count() // 2)  # an older version, well inside the retention window
    older = int(re.search(r"version (\d+)", chosen.get_attribute("aria-label")).group(1))
    chosen.click()
    page.wait_for_url(re.compile(r"(msg|error)="))
    assert "msg=" in page.url, page.locator(".flash").inner_text()
    head = int(re.search(r"\(version (\d+)\)", page.locator(".flash").inner_text()).group(1))
    assert head > older
    fleet.wait(lambda: any(r.version >= head for r in list(fleet.reports)), 60, "a task on the new head")
    # the head devices pulled holds the older version as it was served (its kept average when evaluated)
    served = httpx.get(f"{fleet.url}/v1/models/{model_id}/served", params={"version": older}, timeout=10)
    pulled = httpx.get(f"{fleet.url}/v1/models/{model_id}/versions/{head}/params", timeout=10)
    np.testing.assert_allclose(np.frombuffer(pulled.content, "<f4"), np.frombuffer(served.content, "<f4"))
    page.goto("/admin/models")
    assert page.get_by_role("button", name=re.compile("Roll back")).is_visible()


def test_a_revoked_enrollment_key_is_refused(page, fleet: Fleet):
    page.goto("/admin/settings")
    page.fill("#key-name", "field phones")
    page.get_by_role("button", name="Create key").click()
    secret = page.locator("[data-new-key]").inner_text().strip()
    enroll = {"enrollment_key": secret, "device_model": "Pixel 9"}
    assert httpx.post(f"{fleet.url}/v1/devices", json=enroll).status_code == 201
    page.get_by_role("button", name="Revoke key field phones").click()
    page.wait_for_url(re.compile(r"msg=enrollment"))
    assert httpx.post(f"{fleet.url}/v1/devices", json=enroll).status_code == 401


def test_a_revoked_device_gets_401(page, fleet: Fleet):
    enrolled = httpx.post(
        f"{fleet.url}/v1/devices", json={"enrollment_key": ENROLL, "device_model": "Moto G"}
    )
    device_id, token = enrolled.json()["device_id"], enrolled.json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    bad = {"local_examples": "many"}  # a known token gets past authentication to validation
    assert httpx.post(f"{fleet.url}/v1/tasks", json=bad, headers=headers).status_code == 422
    page.goto("/admin/devices")
    page.get_by_role("button", name=f"Revoke {device_id}").click()
    page.wait_for_url(re.compile(r"msg=device"))
    assert httpx.post(f"{fleet.url}/v1/tasks", json=bad, headers=headers).status_code == 401


def test_a_form_post_without_the_csrf_token_is_refused(page, fleet: Fleet):
    request = page.context.request
    refused = request.post(f"{fleet.url}/admin/training/pause", form={"nothing": "here"}, max_redirects=0)
    assert refused.status == 403
    refused = request.post(
        f"{fleet.url}/admin/training/pause", form={"csrf_token": "forged"}, max_redirects=0
    )
    assert refused.status == 403
    assert fleet.stats()["status"] == "training"
    # the same request with the page's token (as a header, as a script would send it) goes through
    accepted = request.post(f"{fleet.url}/admin/training/resume", headers={"X-CSRF-Token": csrf_of(page)})
    assert accepted.ok and fleet.stats()["status"] == "training"


def test_every_page_at_both_widths(browser, fleet: Fleet, tmp_path: Path):
    out = Path(os.environ.get("FLEET_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    pages = {
        "overview": "/admin", "learning": "/admin/learning", "devices": "/admin/devices",
        "device-model": "/admin/devices/models/Pixel%200", "join": "/admin/join", "models": "/admin/models",
        "settings": "/admin/settings", "privacy": "/admin/privacy", "audit": "/admin/audit",
    }  # fmt: skip
    for width, height in ((1280, 900), (390, 844)):
        context = browser.new_context(viewport={"width": width, "height": height}, base_url=fleet.url)
        tab = context.new_page()
        tab.goto("/admin/login")
        tab.screenshot(path=out / f"console-login-{width}.png")
        log_in(tab)
        for name, path in pages.items():
            response = tab.goto(path)
            assert response.status == 200, (path, response.status)
            charts = tab.locator("[data-chart]")
            for i in range(charts.count()):
                charts.nth(i).locator(".main-svg").first.wait_for(timeout=15_000)
            scroll_width = tab.evaluate("document.documentElement.scrollWidth")
            assert scroll_width <= width + 1, (name, width, scroll_width)  # nothing wider than the screen
            tab.screenshot(path=out / f"console-{name}-{width}.png", full_page=True)
        # keyboard: the first Tab lands on the skip link, the next ones walk the navigation
        tab.goto("/admin")
        tab.keyboard.press("Tab")
        assert tab.evaluate("document.activeElement.textContent") == "Skip to content"
        context.close()
    assert len(list(out.glob("console-*.png"))) == 2 * (len(pages) + 1)


def column(tab, table: str, index: int) -> list[float]:
    """The numbers of one column of a table, in the order the page shows its rows."""
    cells = tab.locator(f"{table} tbody tr td:nth-child({index})").all_inner_texts()
    return [float(re.match(r"[\d,.]+", c).group().replace(",", "")) for c in cells if c[:1].isdigit()]


def test_a_click_on_a_header_sorts_numbers_as_numbers(page, fleet: Fleet):
    fleet.wait(lambda: len(fleet.reports) >= 12, 60, "tasks on every device")
    page.goto("/admin/devices")
    table = '[data-live="devices"] table'
    header = page.locator(f"{table} thead th", has_text="Tasks applied")
    header.get_by_role("button").click()
    assert header.get_attribute("aria-sort") == "ascending"
    values = column(page, table, 5)
    assert values == sorted(values) and len(values) >= 3
    header.get_by_role("button").click()
    assert header.get_attribute("aria-sort") == "descending"
    again = column(page, table, 5)  # the table refreshes live: counts may have grown meanwhile
    assert again == sorted(again, reverse=True) and len(again) == len(values)
    # the device models come worst first: the share of tasks within the SLO never falls down the table
    shares = column(page, '[data-live="device-models"] table', 3)
    assert shares == sorted(shares)


def test_tables_refresh_live_and_keep_their_order(page, fleet: Fleet):
    page.goto("/admin/devices")
    table = '[data-live="devices"] table'
    page.locator(f"{table} thead th", has_text="Tasks applied").get_by_role("button").click()
    region = page.locator('[data-live="devices"]')
    fleet.wait(lambda: int(region.get_attribute("data-refreshed") or 0) >= 2, 30, "two live refreshes")
    header = page.locator(f"{table} thead th", has_text="Tasks applied")
    assert header.get_attribute("aria-sort") == "ascending"  # the operator's sort survives the refill
    values = column(page, table, 5)
    assert values == sorted(values)
    for path in ("/admin/learning", "/admin/audit", "/admin/settings"):
        page.goto(path)
        live = page.locator("[data-live]").first
        fleet.wait(
            lambda live=live: int(live.get_attribute("data-refreshed") or 0) >= 1, 30, f"{path} refresh"
        )


def test_every_navigation_link_fits_a_390_px_screen(browser, fleet: Fleet):
    context = browser.new_context(viewport={"width": 390, "height": 844}, base_url=fleet.url)
    tab = context.new_page()
    log_in(tab)
    links = tab.locator("header nav a")
    hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
    assert len(hrefs) == 8
    for href in hrefs:
        tab.goto("/admin")
        link = tab.locator(f'header nav a[href="{href}"]')
        box = link.bounding_box()
        assert link.is_visible() and box is not None, href
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (href, box)  # on the screen, not cut
        link.click()  # a real click at its centre: nothing covers it
        tab.wait_for_url(re.compile(re.escape(href) + "$"))
    context.close()


def test_a_wrong_password_is_refused_and_a_burst_is_throttled(browser, fleet: Fleet):
    context = browser.new_context(base_url=fleet.url)
    tab = context.new_page()
    log_in(tab, password="not-the-password")
    assert "Wrong username or password" in tab.locator(".flash.error").inner_text()
    assert tab.url.endswith("/admin/login")
    codes: list[int] = []
    while len(codes) < 8 and 429 not in codes:  # stop at the first refusal: tokens refill as time passes
        tab.goto("/admin/login")
        tab.fill("#username", USER)
        tab.fill("#password", "still-not-it")
        with tab.expect_response(lambda r: r.request.method == "POST") as answer:
            tab.click("button[type=submit]")
        codes.append(answer.value.status)
    assert codes[-1] == 429 and set(codes[:-1]) <= {401}, codes
    assert "Too many attempts" in tab.locator(".flash.error").inner_text()
    log_in(tab)  # even the right password waits out the throttle (here a token takes 120 s to refill)
    assert "Too many attempts" in tab.locator(".flash.error").inner_text()
    context.close()
    assert fleet.server.admin("/v1/admin/stats").status_code == 200  # the API is not throttled with it
