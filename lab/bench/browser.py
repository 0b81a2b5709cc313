"""`python -m lab run browser`: the browser device (/device/, docs/browser-device.md) in chromium.

Against real coordinator processes on loopback, with Debian's chromium driven by Playwright
(tests/support/browser_device.py: 390×844, touch, Android Chrome's user agent, one browser profile per
phone), it measures:

* the page's weight on a first visit: every file the first phone loaded until its first task was pushed
  (WASM included; the service worker's precache of the same files counted once), raw, gzip -9, and what
  the coordinator sent (it sends the vendored runtime gzipped, the rest as is); and the model's files;
* the gradient of the CNN in the page's worker against the Python client's GradientSession, on real
  digits at perturbed parameters (max |diff|, the losses, and each side's compute time);
* the time for N phones, each seeded with its IID shard of real MNIST, to reach the target accuracy on
  the coordinator's held-out digits (censored at the cap), and the tasks each phone did;
* frame gaps (requestAnimationFrame intervals) on one phone training alone with the batch the profiler
  sizes to the SLO: p50 / p95 / max of the frames drawn while the worker computed (target p95 ≤ 50 ms).

Writes docs/results/browser.{json,md,png} (browser-quick.* for --quick).
"""

from __future__ import annotations

import gzip
import statistics
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from lab.bench import command, machine, own
from lab.bench.browser_report import plot, report
from lab.bench.plans import BROWSER_FULL, BROWSER_QUICK, BrowserPlan
from lab.contract import Context, Result

FRAME_TARGET_MS = 50.0


def file_weights(base: str, urls: list[str]) -> list[dict[str, Any]]:
    """Each file's raw bytes, gzip -9 bytes and the bytes the coordinator sends a browser accepting gzip."""
    rows = []
    with httpx.Client(base_url=base, timeout=60) as http:
        for url in urls:
            raw = http.get(url, headers={"Accept-Encoding": "identity"}).content
            with http.stream("GET", url, headers={"Accept-Encoding": "gzip"}) as response:
                sent = sum(len(chunk) for chunk in response.iter_raw())
            rows.append({"file": url, "raw": len(raw), "gzip": len(gzip.compress(raw, 9)), "sent": sent})
    return rows


def totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {k: sum(r[k] for r in rows) for k in ("raw", "gzip", "sent")}


def first_visit(server: Any, requested: list[str], model_id: str) -> dict[str, Any]:
    """The page's files (under /device/) and the model's (manifest, graph, one version's parameters)."""
    paths = sorted({urllib.parse.urlsplit(u).path for u in requested})
    app = [p for p in paths if p.startswith("/device/")]
    model = [p for p in paths if p.startswith(f"/v1/models/{model_id}/") and not p.endswith("/active")]
    params = [p for p in model if p.endswith("/params")]
    model = [p for p in model if not p.endswith("/params")] + params[:1]  # one pull: every task makes one
    app_rows, model_rows = file_weights(server.url, app), file_weights(server.url, model)
    return {
        "app": app_rows,
        "app_total": totals(app_rows),
        "model": model_rows,
        "model_total": totals(model_rows),
    }


def gradient_check(page: Any, server: Any, model_id: str, plan: BrowserPlan, test: Any) -> dict[str, Any]:
    """The page's worker against client.GradientSession: same graph, batch and parameters."""
    from client import GradientSession
    from fleet_protocol import Manifest

    get = lambda path: httpx.get(f"{server.url}{path}", timeout=30).content  # noqa: E731
    manifest = Manifest.from_json(get(f"/v1/models/{model_id}/manifest"))
    session = GradientSession(manifest, get(f"/v1/models/{model_id}/graphs/train.onnx"))
    initial = np.frombuffer(get(f"/v1/models/{model_id}/versions/0/params"), "<f4")
    params = (initial + np.random.default_rng(7).normal(0, 0.01, initial.size)).astype(np.float32)
    x, y = test.x[: plan.gradient_batch], test.y[: plan.gradient_batch]
    page.evaluate(
        "(a) => { window.batch = a; }", {"params": params.tolist(), "x": x.ravel().tolist(), "y": y.tolist()}
    )
    browser_ms, python_ms, diffs = [], [], []
    for _ in range(plan.gradient_repeats):
        out = page.evaluate("fleetDevice.gradient(window.batch)")
        started = time.perf_counter()
        loss, gradient = session.loss_and_gradient(params, x, y)
        python_ms.append((time.perf_counter() - started) * 1000)
        browser_ms.append(out["computeMs"])
        diffs.append(float(np.abs(np.asarray(out["gradient"], np.float32) - gradient).max()))
    return {
        "batch": len(y), "max_abs_diff": max(diffs), "loss_browser": out["loss"], "loss_python": loss,
        "loss_diff": abs(out["loss"] - loss), "browser_ms_median": round(statistics.median(browser_ms), 2),
        "python_ms_median": round(statistics.median(python_ms), 2), "repeats": plan.gradient_repeats,
    }  # fmt: skip


def train_to_target(browser: Any, plan: BrowserPlan, work: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """N phones join at once and train until the coordinator's accuracy reaches the target (or the cap)."""
    from fleet.process import ENROLL, ServerProcess
    from sim.data import Dataset, write_shards
    from tests.support import browser_device as bd

    shards, test_path = write_shards(work / "data", devices=plan.devices, partition="iid", seed=1)
    settings: dict[str, Any] = dict(eval_every_versions=10, eval_interval_s=1, max_batch=plan.max_batch)
    if plan.learning_rate is not None:
        settings["learning_rate"] = plan.learning_rate
    server = ServerProcess(work / "train", eval_data=test_path, time_slo_ms=500, **settings).start()
    try:
        model_id = httpx.get(f"{server.url}/v1/models/active").json()["model_id"]
        running = server.admin("/v1/admin/stats").json()["strategy"] or {}  # its name and rate
        contexts = [bd.phone_context(browser, server.url, bd.PHONES[i]) for i in range(plan.devices)]
        requested: list[str] = []
        contexts[0].on("request", lambda r: requested.append(r.url) if r.method == "GET" else None)
        pages = [bd.open_device(c) for c in contexts]
        held = [bd.seed_shard(p, s) for p, s in zip(pages, shards, strict=True)]
        started, joined = time.monotonic(), time.time()
        for page in pages:  # all join at once: the clock runs from here
            page.evaluate("(code) => fleetDevice.setCode(code)", ENROLL)
        first_task: list[float | None] = [None] * len(pages)
        reached, evaluations = None, []
        while time.monotonic() - started < plan.cap_s:
            for i, page in enumerate(pages):
                if first_task[i] is None and bd.state(page)["tasks"] > 0:
                    first_task[i] = round(time.monotonic() - started, 2)
            evaluations = server.admin("/v1/admin/evaluations").json()
            if max((e["accuracy"] for e in evaluations), default=0.0) >= plan.target:
                reached = time.monotonic() - started
                break
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        for page in pages:  # quiet: the gradient's timings below are not shared with training
            page.evaluate("fleetDevice.pause()")
        pages[0].evaluate("navigator.serviceWorker.ready.then(() => true)")  # its precache is done
        states = [bd.state(p) for p in pages]
        weight = first_visit(server, list(requested), model_id)
        gradient = gradient_check(pages[0], server, model_id, plan, Dataset.load(test_path))
        for context in contexts:
            context.close()
    finally:
        server.stop()
    before = [e for e in evaluations if e["at"] < joined]
    curve = before[-1:] + [e for e in evaluations if e["at"] >= joined]
    training = {
        "devices": plan.devices, "target": plan.target, "cap_s": plan.cap_s,
        "seconds_to_target": round(reached, 1) if reached is not None else None,
        "censored": reached is None, "seconds_run": round(elapsed, 1), "examples_per_device": held,
        "tasks_per_device": [s["tasks"] for s in states], "first_task_s": first_task,
        "device_models": [bd.PHONES[i] + " (browser)" for i in range(plan.devices)],
        "best_accuracy": max((e["accuracy"] for e in evaluations), default=None),
        "versions": max((e["version"] for e in evaluations), default=0),
        "last_compute_ms": [s["lastComputeMs"] for s in states], "max_batch": plan.max_batch,
        "strategy": running.get("strategy"), "learning_rate": running.get("learning_rate"),
        "accuracy_curve": [  # seconds since the phones joined (the last evaluation before it: at 0)
            [round(max(0.0, e["at"] - joined), 2), e["version"], e["accuracy"]] for e in curve
        ],
    }  # fmt: skip
    return training, {"weight": weight, "gradient": gradient}


def frames_at_slo(browser: Any, plan: BrowserPlan, work: Path) -> dict[str, Any]:
    """One phone trains alone with the batch I-Prof sizes to the SLO; its frames while the worker computes."""
    from fleet.process import ENROLL, ServerProcess
    from sim.data import load_mnist
    from tests.support import browser_device as bd

    train, _ = load_mnist(seed=1)
    server = ServerProcess(work / "slo", time_slo_ms=plan.slo_ms, max_batch=plan.slo_max_batch).start()
    try:
        context = bd.phone_context(browser, server.url)
        page = bd.open_device(context)
        bd.seed(page, train.x[: plan.slo_examples], train.y[: plan.slo_examples])
        page.evaluate("(code) => fleetDevice.setCode(code)", ENROLL)
        bd.wait_state(page, lambda s: s["tasks"] >= plan.slo_warmup_tasks, 120, "the warm-up tasks")
        tasks_before = bd.state(page)["tasks"]
        page.evaluate("fleetDevice.clearFrameGaps()")
        time.sleep(plan.slo_seconds)
        busy, idle = bd.busy_gaps(page)
        tasks = bd.state(page)["tasks"] - tasks_before
        model = urllib.parse.quote(bd.PHONES[0] + " (browser)")
        measured = server.admin(f"/v1/admin/profiler/{model}?limit=500").json().get("pairs", [])
        context.close()
    finally:
        server.stop()
    recent = measured[-max(tasks, 1) :]
    return {
        "slo_ms": plan.slo_ms, "max_batch": plan.slo_max_batch, "examples": plan.slo_examples,
        "seconds": plan.slo_seconds, "tasks": tasks, "target_p95_ms": FRAME_TARGET_MS,
        "busy": bd.gap_stats(busy), "idle": bd.gap_stats(idle), "all": bd.gap_stats(busy + idle),
        "busy_share": round(len(busy) / max(1, len(busy) + len(idle)), 3),
        "batch_median": statistics.median([t["batch_size"] for t in recent]) if recent else None,
        "compute_ms_median": round(statistics.median([t["time_ms"] for t in recent]), 1) if recent else None,
        "histogram": np.histogram(busy, bins=[0, 10, 20, 30, 40, 50, 75, 100, 200, 500, 1e9])[0].tolist(),
    }  # fmt: skip


def run(plan: BrowserPlan, ctx: Context) -> Result:
    from playwright.sync_api import sync_playwright

    from tests.support import browser_device as bd

    ctx.workdir.mkdir(parents=True, exist_ok=True)
    with ctx.steps("phases", 2) as steps, sync_playwright() as playwright:
        browser = bd.launch(playwright)
        version = browser.version
        try:
            training, first = train_to_target(browser, plan, ctx.workdir)
            steps.advance()
            frames = frames_at_slo(browser, plan, ctx.workdir)
            steps.advance()
        finally:
            browser.close()
    runtime = (
        (Path(__file__).resolve().parents[2] / "server/device/static/vendor/VERSION.txt").read_text().strip()
    )
    record = {
        "command": command("browser", plan), "runtime": runtime, "chromium": version,
        "weight": first["weight"], "gradient": first["gradient"], "training": training, "frames": frames,
        "machine": machine(),
    }  # fmt: skip
    time_text = (
        f"≥ {plan.cap_s:.0f} s (censored)" if training["censored"] else f"{training['seconds_to_target']} s"
    )
    sent = first["weight"]["app_total"]["sent"] / 1e6
    summary = (
        f"browser device: {sent:.2f} MB sent on a first visit, gradient "
        f"max |diff| {first['gradient']['max_abs_diff']:.1e}, {plan.devices} phones to {plan.target:.0%} in "
        f"{time_text}, frame gaps while computing p95 {frames['busy']['p95_ms']} ms"
    )
    return Result({"text": summary}, records=record)


EXPERIMENT = own(
    "browser", "browser", BROWSER_QUICK, BROWSER_FULL, run, lambda result, plan: report(result.records),
    summary_in_json=True, plot=lambda result: plot(result.records),
)  # fmt: skip
