"""Issue 29's closing check, done for real: "tried again as an operator would, each numbered finding is gone".

Unit tests prove each fix in isolation; this walk-through asks the operator's questions of a running system
instead: a real ``fleet serve`` (127.0.0.1, a free port, a temp SQLite file, secrets made at run time) with 8
emulated phones as ``fleet worker`` processes, its console in Debian's headless Chromium at 1440 and 390 px,
plain HTTP for what a browser cannot do (client addresses, a slow body, a 1e30 push), then ``fleet demo
--dp-epsilon 8``. Every check records what it saw, and a finding is marked gone only when the operator
would see it gone; the report is docs/results/operator-walkthrough.{md,json}, with walkthrough-*.png in
docs/screenshots. Bounded to under 10 minutes; every process it starts is stopped in a ``finally``.

    .venv/bin/python -m lab.probes.operator_walkthrough
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import sync_playwright

from lab.probes import walkthrough_checks as wc
from lab.probes.walkthrough_pages import (
    RESULTS,
    ROOT,
    SCI,
    SHOTS,
    Walk,
    devices,
    learning,
    log_in,
    models,
    phone_and_audit,
    settings_and_strategy,
)

CHROMIUM = "/usr/bin/chromium"
BUDGET_S = 570.0  # everything, the DP demo included, ends before 10 minutes


def http_checks(w: Walk) -> None:
    url, fleet = w.fleet.url, w.fleet
    ops = {}
    for path in ("/metrics", "/docs"):
        bare = httpx.get(url + path, timeout=15).status_code
        bearer = httpx.get(url + path, headers={"Authorization": f"Bearer {fleet.ops_token}"}, timeout=15)
        basic = httpx.get(url + path, auth=("ops", fleet.ops_token), timeout=15).status_code
        ops[path] = {"no token": bare, "bearer": bearer.status_code, "basic": basic}
        if path == "/metrics":
            w.obs["metrics_health"] = [ln for ln in bearer.text.splitlines() if ln.startswith("fleet_health")]
    w.see(
        "9",
        f"with FLEET_OPS_TOKEN set: {ops}",
        all(v["no token"] == 401 and v["bearer"] == 200 for v in ops.values()),
        ops_token=ops,
    )
    csrf = w.tab.locator('meta[name="csrf-token"]').get_attribute("content") or ""
    origin = {}
    for claimed in ("https://evil.example", url):
        answer = w.tab.request.post(
            f"{url}/admin/settings", form={"csrf_token": csrf}, headers={"Origin": claimed}, max_redirects=0
        )
        origin[claimed] = [answer.status, answer.text()[:80]]
    w.see(
        "H4",
        f"console POST with a valid token: {origin}",
        origin["https://evil.example"][0] == 403 and origin[url][0] != 403,
        origin=origin,
    )
    times = [wc.login(url, f"127.0.0.{20 + i}", fleet.password) for i in range(5)]
    seconds = [round(t, 2) for _, t in times]
    w.see(
        "8",
        f"5 logins under load (8 phones training): {seconds} s (noisy: shared 2-core machine), statuses "
        f"{[s for s, _ in times]}",
        all(s == 303 for s, _ in times) and sorted(seconds)[2] < 1.0,
        logins_s=seconds,
    )
    wrong = [wc.login(url, f"127.0.0.{30 + i}", "not-the-password")[0] for i in range(8)]
    right = wc.login(url, "127.0.0.40", fleet.password)[0]
    w.see(
        "H2",
        f"8 wrong from 8 addresses: {wrong}; then the right one from a 9th: {right} (addresses: "
        "connections bound "
        "to 127.0.0.30-40, no X-Forwarded-For)",
        right == 303,
        wrong=wrong,
        right=right,
    )
    xff = [wc.login(url, "127.0.0.50", "nope", {"X-Forwarded-For": f"10.9.0.{i}"})[0] for i in range(8)]
    w.see("H3", f"one address rotating X-Forwarded-For: {xff}", 429 in xff, xff=xff)
    push = wc.huge_push(fleet)
    w.see(
        "H1",
        f"1e30 push answered {push['status']} {push['answer'][:70]!r}; largest parameter after "
        f"{push['largest_parameter_after']:.3g}",
        push["status"] == 422 and push["largest_parameter_after"] < 1e3,
        push=push,
    )


def accuracy_kept(w: Walk) -> None:
    """20+ s after the refused audp save: every worker still runs, no traceback, accuracy did not fall."""
    w.tab.wait_for_timeout(max(0.0, 20 - (time.monotonic() - w.obs["audp"]["at"])) * 1000)
    now = w.overview()
    alive, tracebacks = w.fleet.workers_alive(), w.fleet.worker_tracebacks()
    before, after = w.obs["audp"]["accuracy_before"], now["accuracy"]
    w.obs["audp"].update(
        accuracy_after=after, version_after=now["version"], alive=alive, tracebacks=tracebacks
    )
    w.see(
        "1",
        f"{time.monotonic() - w.obs['audp']['at']:.0f} s later: {alive}/8 workers alive, tracebacks "
        f"{tracebacks or 'none'}, accuracy {before} → {after} "
        f"(v{w.obs['audp']['version_before']} → v{now['version']})",
        alive == 8 and not tracebacks and after is not None and after >= before - 0.05,
    )


def degraded(w: Walk, dp_started: float) -> None:
    """Kill every worker with the Overview open; when does it (and /v1/ready) say no push arrives?"""
    w.page("/admin", "overview-before-kill")
    state0 = w.tab.locator("[data-health]").get_attribute("data-codes")
    w.fleet.kill_workers()
    killed = time.monotonic()
    seen_api = seen_page = None
    while time.monotonic() - killed < 50 and seen_page is None:
        ready = httpx.get(f"{w.fleet.url}/v1/ready", timeout=10).json()
        codes = [r["code"] for r in ready.get("health", {}).get("reasons", [])]
        if seen_api is None and "no_pushes" in codes:
            seen_api = time.monotonic() - killed
        if "no_pushes" in (w.tab.locator("[data-health]").get_attribute("data-codes") or ""):
            seen_page = time.monotonic() - killed
        w.tab.wait_for_timeout(500)
    banner = w.tab.locator("[data-health]").inner_text()
    w.shot("overview-degraded-1440")
    api = f"{seen_api:.1f} s" if seen_api is not None else "never (50 s)"
    page = f"{seen_page:.1f} s" if seen_page is not None else "never (50 s)"
    seen = f"8 workers killed (reasons before: {state0!r}); the open Overview (no reload): {banner[:140]!r}"
    w.see("2", seen, seen_page is not None, banner=banner)
    seen = f"no_pushes on /v1/ready after {api}, on the open Overview after {page} (it refreshes every 3 s)"
    on_time = seen_api is not None and seen_page is not None and max(seen_api, seen_page) <= 30
    w.see("2-30s", seen, on_time, degraded_after_s={"ready": seen_api, "overview": seen_page})
    w.obs["dp_demo_started_before_kill_check_s"] = round(killed - dp_started, 1)


def dp_demo(w: Walk, demo: subprocess.Popen[bytes], port: int, log: Path, deadline: float) -> None:
    url, codes_seen, metrics_open = f"http://127.0.0.1:{port}", {}, None
    while demo.poll() is None and time.monotonic() < deadline:
        try:
            ready = httpx.get(f"{url}/v1/ready", timeout=5).json()
            for r in ready.get("health", {}).get("reasons", []):
                codes_seen.setdefault(r["code"], r["message"])
            metrics_open = metrics_open or httpx.get(f"{url}/metrics", timeout=5).status_code
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(1)
    out = log.read_text(errors="replace")
    buys = re.search(r"ε = [\d.]+ per phone.*?(?:\n\n|$)", out, re.S)
    stated = re.search(r"measured: final accuracy (\d\.\d+)", out)
    final = re.search(r"final test accuracy[^\n]*?(\d\.\d{4}) at v", out)
    verdict = re.search(r"(Every phone is out of privacy budget|The run ended at)[^\n]*(?:\n[^\n│]+)*", out)
    readme = re.search(r"ε = 2 does not buy[^\n]*\n[^\n]*", (ROOT / "README.md").read_text())
    got = float(final.group(1)) if final else None
    want = float(stated.group(1)) if stated else None
    ok = (
        got is not None
        and want is not None
        and abs(got - want) <= 0.10
        and buys is not None
        and readme is not None
    )
    w.see(
        "7",
        f"exit {demo.poll()}; on screen at start: {(buys.group(0) if buys else 'nothing')[:220]!r}; final "
        f"accuracy {got} against the stated {want} (±0.10: one seed); at the end: "
        f"{(verdict.group(0) if verdict else 'no verdict')[:200]!r}; "
        f"README: {(readme.group(0) if readme else 'silent')[:120]!r}",
        ok,
        dp_demo_output_tail=out[-3000:],
    )
    exhausted = "privacy_exhausted" in codes_seen
    w.see("2", f"DP demo's /v1/ready reasons seen: {codes_seen}", exhausted, dp_health=codes_seen)
    w.see(
        "9",
        f"DP demo (no FLEET_OPS_TOKEN, the default): /metrics answered {metrics_open} without a token",
        metrics_open == 200,
    )


def static_evidence(w: Walk, audp: dict[str, Any]) -> None:
    w.see(
        "1",
        f"`FLEET_STRATEGY=audp fleet serve`: exit {audp['exit_code']}, {audp['message'][:160]!r}; a device "
        "declining terms it cannot run: tests/test_task_decline.py::"
        "test_a_device_declines_terms_it_cannot_run_and_keeps_working",
        audp["exit_code"] not in (0, None) and "DP" in audp["message"],
        audp_startup=audp,
    )
    gz = httpx.get(
        f"{w.fleet.url}/admin/static/plotly-basic.min.js", headers={"Accept-Encoding": "gzip"}, timeout=30
    )
    sent = int(gz.headers.get("content-length", "0"))
    w.see(
        "8",
        f"chart bundle: {len(gz.content):,} bytes ({sent:,} gzipped on the wire)",
        sent < 450_000,
        plotly_bytes=[len(gz.content), sent],
    )
    metrics = w.obs.get("metrics_health", [])
    alerts = (ROOT / "docs/ops/alerts.yml").exists() and (ROOT / "docs/ops/grafana-dashboard.json").exists()
    w.see(
        "2",
        f"/metrics: {metrics[:3]}; docs/ops alert rules and dashboard present: {alerts}",
        alerts and any(m.startswith("fleet_health_state") for m in metrics),
    )
    found = {
        f"{f}::{n}": f"def {n}(" in (ROOT / f).read_text() for f, names in wc.APP_TESTS.items() for n in names
    }
    w.f["10"].seen = "covered by " + ", ".join(
        f"{k} ({'present' if v else 'MISSING'})" for k, v in found.items()
    )
    w.f["10"].evidence["tests"] = found
    sci = {name: SCI.findall(text) for name, text in w.texts.items() if SCI.search(text)}
    w.see(
        "5",
        f"e-notation on the pages visited ({', '.join(w.texts)}): {sci or 'none'}",
        not sci,
        e_notation=sci,
    )


def main() -> int:
    started, stamp = time.monotonic(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: `make {CHROMIUM}`")
    tmp = Path(tempfile.mkdtemp(prefix="walkthrough-"))
    SHOTS.mkdir(parents=True, exist_ok=True)
    fleet, demo = wc.Fleet(tmp), None
    w = Walk(fleet)
    try:
        fleet.start()
        audp = wc.audp_at_startup(tmp)
        while (
            fleet.admin("/v1/admin/stats").get("accuracy") or 0
        ) < 0.5 and time.monotonic() - started < 200:
            time.sleep(2)
        slow: dict[str, Any] = {}
        threading.Thread(target=lambda: slow.update(wc.slow_body(fleet.port)), daemon=True).start()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=fleet.url)
            w.tab = context.new_page()
            w.tab.on("dialog", lambda dialog: dialog.accept())
            w.obs["browser_login_s"] = round(log_in(w.tab, fleet.password), 2)
            ov = w.overview()
            w.page("/admin", "overview")
            w.shot("overview-1440")
            w.see(
                "2",
                f"overview.json health {ov['health']}",
                ov.get("health", {}).get("state") in ("ok", "degraded"),
            )
            for step in (
                settings_and_strategy,
                learning,
                devices,
                models,
                phone_and_audit,
                http_checks,
                accuracy_kept,
            ):
                try:
                    step(w)
                except Exception as exc:  # a broken step is reported, not hidden, and the others still run
                    w.obs.setdefault("errors", []).append(
                        f"{step.__name__}: {type(exc).__name__}: {exc}"[:400]
                    )
            static_evidence(w, audp)
            w.see("H5", f"slow body: {slow or 'no answer yet'}", slow.get("status") == 408, slow_body=slow)
            port, log = wc.free_port(), tmp / "dp-demo.out"
            demo = subprocess.Popen(
                [
                    wc.PY,
                    "-m",
                    "fleet.cli",
                    "demo",
                    "--dp-epsilon",
                    "8",
                    "--port",
                    str(port),
                    "--workdir",
                    str(tmp / "dp"),
                    "--linger",
                    "15",
                ],
                env=wc.clean_env(COLUMNS="400", TERM="dumb"),
                cwd=tmp,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
            )
            degraded(w, time.monotonic())
            browser.close()
        dp_demo(w, demo, port, log, started + BUDGET_S)
    finally:
        fleet.stop()
        wc.stop_process(demo)
        w.obs.update(started=stamp, seconds=time.monotonic() - started, screenshots=w.shots, workdir=str(tmp))
        wc.write_report(
            list(w.f.values()),
            w.obs,
            RESULTS / "operator-walkthrough.md",
            RESULTS / "operator-walkthrough.json",
        )
        if not w.obs.get("errors"):
            shutil.rmtree(tmp, ignore_errors=True)  # kept (logs, no secret of the repo's) when a step broke
    still = [f.key for f in w.f.values() if f.gone is False]
    print(f"{len(w.f)} findings, still there: {still or 'none'}; errors: {w.obs.get('errors', 'none')}")
    return 1 if still or w.obs.get("errors") else 0


if __name__ == "__main__":
    raise SystemExit(main())
