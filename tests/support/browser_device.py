"""Browser devices: the coordinator's /device/ page in Debian's chromium (Playwright; never a browser it
downloads), at phone size with touch, seeded with a shard of real MNIST through the page's own store.

Shared by tests/test_browser_device.py and the lab's browser benchmark (lab/bench/browser.py).
"""

from __future__ import annotations

import base64
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Android Chrome's user agent of a few phones: each page enrolls as its own device model
PHONES = ("Pixel 7", "SM-S911B", "Pixel 6a", "moto g54 5G", "CPH2451", "Pixel 8")
CHROME_UA = (
    "Mozilla/5.0 (Linux; Android 14; {model}) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/124.0.0.0 Mobile Safari/537.36"
)
PHONE_VIEWPORT = {"width": 390, "height": 844}


def launch(playwright: Any) -> Any:
    """Debian's chromium, headless."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])


def phone_context(browser: Any, base_url: str, model: str = PHONES[0], service_workers: str = "allow") -> Any:
    """A fresh browser profile shaped like an Android phone: 390×844, touch, mobile, Chrome's user agent
    (``service_workers="block"``: Playwright's routes then see every request)."""
    return browser.new_context(
        viewport=PHONE_VIEWPORT,
        device_scale_factor=2,
        has_touch=True,
        is_mobile=True,
        user_agent=CHROME_UA.format(model=model),
        base_url=base_url,
        service_workers=service_workers,
    )


def open_device(context: Any, join: str | None = None, errors: list[str] | None = None) -> Any:
    """The device page in a new tab of ``context`` (joining with ``join``), once its script is ready."""
    page = context.new_page()
    if errors is not None:
        page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto("/device/" + (f"#join={join}" if join else ""))
    wait_ready(page)
    return page


def wait_js(page: Any, expression: str, timeout: float = 60.0, what: str = "") -> Any:
    """Poll a JavaScript expression until it is truthy (the page's CSP forbids the string evaluation
    Playwright's wait_for_function polls with; page.evaluate goes through the DevTools protocol)."""
    deadline = time.monotonic() + timeout
    while not (value := page.evaluate(expression)):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or expression}")
        time.sleep(0.1)
    return value


def wait_ready(page: Any) -> None:
    """Until the page's script has started (window.fleetDevice is there)."""
    wait_js(page, "document.body.dataset.ready === 'true'", 60.0, "the device page to start")


def as_bytes(x: np.ndarray) -> np.ndarray:
    """Images in [0, 1] as the page stores them (uint8, ink 255): exact for MNIST's k/255 values."""
    return np.clip(np.rint(np.asarray(x, np.float32).reshape(len(x), -1) * 255.0), 0, 255).astype(np.uint8)


def seed(page: Any, x: np.ndarray, y: np.ndarray) -> int:
    """Add labelled images to the page's store (IndexedDB) through its hook; returns how many it holds."""
    pixels = base64.b64encode(as_bytes(x).tobytes()).decode()
    return int(page.evaluate("([b, y]) => fleetDevice.addSampleBytes(b, y)", [pixels, [int(v) for v in y]]))


def seed_shard(page: Any, path: str | Path) -> int:
    with np.load(path) as shard:
        return seed(page, shard["x"], shard["y"])


def state(page: Any) -> dict[str, Any]:
    return page.evaluate("fleetDevice.state()")


def wait_state(
    page: Any, condition: Callable[[dict[str, Any]], bool], timeout: float, what: str, poll: float = 0.2
) -> dict[str, Any]:
    """Poll the page's state until ``condition`` holds; the last state is in the error otherwise."""
    deadline = time.monotonic() + timeout
    now = state(page)
    while not condition(now):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {now}")
        time.sleep(poll)
        now = state(page)
    return now


def draw(page: Any, strokes: list[list[tuple[float, float]]], selector: str = "#pad") -> None:
    """Draw with a finger: touch events through the DevTools protocol, at points relative to the pad."""
    box = page.locator(selector).bounding_box()
    cdp = page.context.new_cdp_session(page)
    for stroke in strokes:
        points = [{"x": box["x"] + x, "y": box["y"] + y} for x, y in stroke]
        cdp.send("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [points[0]]})
        for point in points[1:]:
            cdp.send("Input.dispatchTouchEvent", {"type": "touchMove", "touchPoints": [point]})
        cdp.send("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})
    cdp.detach()


def gap_stats(gaps: list[float]) -> dict[str, float | int | None]:
    """p50 / p95 / max of frame intervals in ms (None without frames)."""
    if not gaps:
        return {"frames": 0, "p50_ms": None, "p95_ms": None, "max_ms": None}
    ordered = np.sort(np.asarray(gaps, np.float64))
    return {
        "frames": len(ordered),
        "p50_ms": round(float(np.percentile(ordered, 50)), 1),
        "p95_ms": round(float(np.percentile(ordered, 95)), 1),
        "max_ms": round(float(ordered[-1]), 1),
    }


def busy_gaps(page: Any) -> tuple[list[float], list[float]]:
    """The frame intervals recorded while a computation was in the worker, and the others."""
    snapshot = page.evaluate("fleetDevice.frameGaps()")
    pairs = list(zip(snapshot["gaps"], snapshot["busy"], strict=True))
    return [g for g, b in pairs if b], [g for g, b in pairs if not b]


def best_accuracy(server: Any) -> float:
    evaluations = server.admin("/v1/admin/evaluations").json()
    return max((e["accuracy"] for e in evaluations), default=0.0)
