"""Screenshots, page weight and page time of the admin console, for docs/console.md.

Starts the browser tests' fleet (a coordinator process and three training workers), then, in Debian's
headless chromium:

- screenshots of Overview, Devices and Settings at 1440 px into ``--shots`` (``console-<page>-<tag>.png``);
- per page, the bytes of every response its load fetched (HTML, CSS, scripts, chart data), raw and gzipped;
- per page, ``--loads`` cold loads (a fresh browser context each, so nothing is cached) timed from
  navigation until every chart is drawn; the median and p95 are printed.

    .venv/bin/python -m tests.support.console_snapshot --tag after --shots docs/screenshots

It is a measuring tool, not a test: the bounds the tests assert are in tests/test_console_core.py.
"""

from __future__ import annotations

import argparse
import gzip
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.test_console_browser import CHROMIUM, Fleet, log_in

PAGES = {
    "overview": "/admin",
    "learning": "/admin/learning",
    "devices": "/admin/devices",
    "models": "/admin/models",
    "settings": "/admin/settings",
    "privacy": "/admin/privacy",
    "audit": "/admin/audit",
}
SHOTS = ("overview", "devices", "settings")


def _drawn(tab) -> None:
    """Wait until every chart on the page has its SVG (plotly drew it)."""
    charts = tab.locator("[data-chart]")
    for i in range(charts.count()):
        charts.nth(i).locator(".main-svg").first.wait_for(timeout=20_000)


def _weight(context, path: str) -> tuple[int, int, int]:
    """(requests, raw bytes, gzipped bytes) of everything one cold load of ``path`` fetched."""
    tab = context.new_page()
    bodies: list[bytes] = []
    tab.on("requestfinished", lambda request: bodies.append(request.response().body()))
    tab.goto(path)
    _drawn(tab)
    tab.close()
    return len(bodies), sum(map(len, bodies)), sum(len(gzip.compress(b, 6)) for b in bodies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="after")
    parser.add_argument("--shots", type=Path, default=Path("docs/screenshots"))
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--no-shots", action="store_true", help="measure only")
    parser.add_argument("--pages", nargs="*", default=list(PAGES), help="the pages to weigh and time")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: still stop the coordinator (finally)
    fleet = Fleet(Path(tempfile.mkdtemp(prefix="console-snapshot-")))
    try:
        fleet.wait(lambda: fleet.stats()["version"] >= 8, 120, "first versions")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
            )
            context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=fleet.url)
            tab = context.new_page()
            log_in(tab)
            cookies = context.cookies()
            args.shots.mkdir(parents=True, exist_ok=True)
            for name in () if args.no_shots else SHOTS:
                tab.goto(PAGES[name])
                _drawn(tab)
                tab.screenshot(path=args.shots / f"console-{name}-{args.tag}.png", full_page=True)
            print(f"({args.tag}, {args.loads} cold loads per page)")
            print("| page | requests | bytes | gzipped | median ms | p95 ms |")
            for name, path in ((n, PAGES[n]) for n in args.pages):
                cold = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=fleet.url)
                cold.add_cookies(cookies)
                requests, raw, zipped = _weight(cold, path)
                cold.close()
                times: list[float] = []
                for _ in range(args.loads):
                    cold = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=fleet.url)
                    cold.add_cookies(cookies)
                    page = cold.new_page()
                    start = time.perf_counter()
                    page.goto(path)
                    _drawn(page)
                    times.append((time.perf_counter() - start) * 1000)
                    cold.close()
                times.sort()
                p95 = times[max(0, round(0.95 * len(times)) - 1)]
                median = statistics.median(times)
                row = f"| {name} | {requests} | {raw:,} | {zipped:,} | {median:.0f} | {p95:.0f} |"
                print(row, flush=True)
            browser.close()
    finally:
        fleet.close()


if __name__ == "__main__":
    main()
