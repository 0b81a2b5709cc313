"""The console half of the operator walk-through (lab/probes/operator_walkthrough.py): the walk's state and
each page an operator opens, in Debian's headless Chromium, with what it saw recorded per finding."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page

from lab.probes import walkthrough_checks as wc

ROOT = Path(__file__).resolve().parents[2]
SHOTS, RESULTS = ROOT / "docs" / "screenshots", ROOT / "docs" / "results"
SCI = re.compile(r"(?<![\w.-])\d(?:\.\d+)?e[+-]\d+(?![\w-])")  # 2.24e+10, 1e+03: unreadable figures


class Walk:
    """The walk-through's state: the fleet, the findings, the browser tab and what it has seen."""

    def __init__(self, fleet: wc.Fleet) -> None:
        self.fleet = fleet
        self.f = wc.findings()
        self.obs: dict[str, Any] = {}
        self.texts: dict[str, str] = {}
        self.shots: list[str] = []
        self.tab: Page

    def see(self, key: str, seen: str, gone: bool, **evidence: Any) -> None:
        finding = self.f[key]
        first = finding.gone is None and not finding.evidence.get("_seen")
        finding.seen = seen if first else f"{finding.seen}; {seen}"
        finding.gone = bool(gone) if finding.gone is None else (finding.gone and bool(gone))
        finding.evidence["_seen"] = True
        finding.evidence.update(evidence)

    def page(self, path: str, name: str) -> str:
        self.tab.goto(path)
        self.tab.wait_for_load_state("networkidle")
        text = self.tab.inner_text("main")
        self.texts.setdefault(name, text)
        return text

    def shot(self, name: str) -> None:
        path = SHOTS / f"walkthrough-{name}.png"
        self.tab.screenshot(path=str(path))
        try:  # a 64-colour palette: a console page stays legible at a fraction of the bytes
            from PIL import Image

            Image.open(path).convert("RGB").quantize(64).save(path, optimize=True)
        except ImportError:
            pass
        self.shots.append(f"docs/screenshots/{path.name}")

    def overview(self) -> dict[str, Any]:
        return self.tab.request.get(f"{self.fleet.url}/admin/data/overview.json").json()

    def submit_settings(self, fill: dict[str, str], select: dict[str, str]) -> tuple[int, str]:
        self.tab.goto("/admin/settings")
        for selector, value in fill.items():
            self.tab.fill(selector, value)
        for selector, value in select.items():
            self.tab.select_option(selector, value)
        with self.tab.expect_response(
            lambda r: r.request.method == "POST" and "/admin/settings" in r.url
        ) as answer:
            self.tab.click("form.settings button[type=submit]")
        self.tab.wait_for_load_state("networkidle")
        flash = self.tab.locator(".flash").first
        return answer.value.status, flash.inner_text() if flash.count() else ""


def log_in(tab: Page, password: str) -> float:
    started = time.perf_counter()
    tab.goto("/admin/login")
    tab.fill("#username", wc.USER)
    tab.fill("#password", password)
    tab.click("button[type=submit]")
    tab.wait_for_url(re.compile(r".*/admin$"))
    return time.perf_counter() - started


def settings_and_strategy(w: Walk) -> None:
    text = w.page("/admin/settings", "settings")
    labels = [t.strip() for t in w.tab.locator("form.settings label").all_inner_texts()]
    raw = [
        t
        for t in labels
        if re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", t) or t in ("k", "time_window", "dp_step_epsilon")
    ]
    slo = w.tab.locator("label[for='f-time_slo_ms']").inner_text()
    rate_hint = w.tab.locator("small[id$='learning_rate']").first.inner_text()
    rate_holder = w.tab.locator("input[id$='learning_rate']").first.get_attribute("placeholder") or ""
    shown = bool(re.search(r"\d", rate_hint + rate_holder)) and "default" in (rate_hint + rate_holder)
    w.see(
        "5",
        f"{len(labels)} settings labels, raw variable names: {raw or 'none'}; time SLO label {slo!r}; "
        f"learning rate shows {rate_holder!r} / {rate_hint[:60]!r}",
        not raw and "ms" in slo and shown,
        labels=labels,
        learning_rate_hint=rate_hint,
        learning_rate_placeholder=rate_holder,
    )
    before = w.overview()
    status, flash = w.submit_settings({}, {"#f-strategy": "audp"})
    w.shot("settings-audp-refused-1440")
    after_strategy = w.tab.locator("#f-strategy").input_value()
    w.tab.goto("/admin/settings")
    kept = w.tab.locator("#f-strategy").input_value()
    w.obs["audp"] = {
        "at": time.monotonic(),
        "accuracy_before": before["accuracy"],
        "version_before": before["version"],
    }
    w.see(
        "1",
        f"Settings answered {status}: {flash[:160]!r}; strategy still {kept!r}",
        status == 422 and "DP" in flash and kept != "audp",
        audp_form={"status": status, "flash": flash, "form_shows": after_strategy, "saved": kept},
    )
    for value in ("inf", "1e300"):
        status, flash = w.submit_settings({"[id='f-max_gradient_norm']": value}, {})
        w.tab.goto("/admin/settings")
        saved = w.tab.locator("[id='f-max_gradient_norm']").input_value()
        w.see(
            "H1",
            f"max_gradient_norm={value}: {status}, {flash[:90]!r}, field now {saved!r}",
            status == 422 and "inf" not in saved and "300" not in saved,
            **{f"norm_{value}": [status, flash, saved]},
        )
    w.obs["settings_text_scanned"] = len(text)


def learning(w: Walk) -> None:
    text = w.page("/admin/learning", "learning")
    charts = w.tab.eval_on_selector_all("[data-chart]", "els => els.map(e => e.dataset.chart)")
    tau = w.tab.request.get(f"{w.fleet.url}/admin/charts/tau").json()
    names = [t.get("name", "") for t in tau.get("data", [])]
    raw = bool(re.search(r"\{['\"]|['\"]: ", text))
    strategy = w.overview()["strategy"]["strategy"]
    live = w.tab.locator("[data-live]").count()
    ok = (
        not raw
        and "similarity" not in charts
        and not any("τ" in n or "thres" in n for n in names)
        and live > 0
    )
    w.see(
        "5",
        f"Learning ({strategy}): state dict printed: {raw}; charts {charts}; τ chart traces {names}",
        ok,
        learning_charts=charts,
        tau_traces=names,
    )
    w.obs["learning_live_regions"] = live


def devices(w: Walk) -> None:
    w.page("/admin/devices", "devices")
    rows = w.tab.locator("#device-models tbody tr")
    order = [
        (
            r.get_attribute("data-device-model"),
            r.locator("td").nth(2).get_attribute("data-sort"),
            r.locator("td").nth(4).inner_text(),
            r.locator("td").nth(1).inner_text(),
        )
        for r in rows.all()
    ]
    shares = [float(s) for _, s, _, _ in order if s]
    worst_first = shares == sorted(shares)
    w.shot("devices-1440")
    button = w.tab.locator("#device-models thead th").nth(4).locator("button.sort")
    sorted_by: dict[str, list[float]] = {}
    for click in ("ascending", "descending"):
        button.click()
        sorted_by[click] = [
            float(v)
            for v in w.tab.eval_on_selector_all(
                "#device-models tbody tr td:nth-child(5)", "els => els.map(e => e.dataset.sort || 'nan')"
            )
            if v != "nan"
        ]
    sortable = (
        sorted_by["ascending"] == sorted(sorted_by["ascending"])
        and sorted_by["descending"] == sorted(sorted_by["descending"], reverse=True)
        and len(sorted_by["ascending"]) > 1
    )
    w.see(
        "4",
        f"SLO table rows (model, share within, batch p50 (range), verdict): {order}; worst first: "
        f"{worst_first}; a click on 'Batch size' sorts it {sorted_by['ascending']}, "
        f"again {sorted_by['descending']}",
        worst_first and sortable and len(order) >= 5,
        slo_rows=order,
        sorted=sorted_by,
    )
    features = w.tab.locator("td.features").first.inner_text()
    w.see(
        "5",
        f"Devices features read {features[:80]!r}",
        "GB" in features and "=" not in features,
        features=features,
    )
    # live refresh: the same document, new figures (a marker set in the page survives: no reload)
    w.tab.evaluate("window.__walk = 1")
    before = w.tab.locator("#device-models").inner_text()
    w.tab.wait_for_timeout(7000)
    after = w.tab.locator("#device-models").inner_text()
    same_doc = w.tab.evaluate("window.__walk === 1")
    w.see(
        "8",
        f"Devices SLO table refilled in place within 7 s: {before != after} (same document: {same_doc}); "
        f"Learning has {w.obs['learning_live_regions']} live region(s)",
        before != after and same_doc and w.obs["learning_live_regions"] > 0,
    )
    link = w.tab.locator("#device-models a", has_text="Galaxy S9/S9+")
    href = link.get_attribute("href") or ""
    answer = w.tab.request.get(f"{w.fleet.url}{href}")
    w.see(
        "H6",
        f"link {href!r} answers {answer.status}",
        answer.status == 200 and "Galaxy S9/S9+" in answer.text(),
        href=href,
        status=answer.status,
    )


def models(w: Walk) -> None:
    model_id = w.overview()["model_id"]
    data = w.tab.request.get(f"{w.fleet.url}/admin/models/{model_id}/infer.onnx").body()
    api = httpx.get(f"{w.fleet.url}/v1/models/{model_id}/inference.onnx", timeout=30).content
    console, direct = wc.onnx_runs(data), wc.onnx_runs(api)
    w.see(
        "3",
        f"console download {len(data):,} bytes: {console}; the API's: loads {direct.get('loads')}",
        bool(console.get("loads")),
        console_onnx=console,
        api_onnx=direct,
    )
    text = w.page("/admin/models", "models")
    badge = w.tab.locator("section.model.active .badge").inner_text()
    w.see("5", f"Models badge {badge!r}", badge.count("training") <= 1, badge=badge)
    rows = w.tab.locator("section.model.active tbody tr")
    pick = next(
        r
        for r in rows.all()
        if r.locator("td").nth(3).inner_text() != "—" and r.locator("button").count() > 1
    )
    source = int(pick.locator("td").first.inner_text())
    head_before = w.overview()["version"]
    pick.locator("button", has_text="Promote").click()
    w.tab.wait_for_load_state("networkidle")
    flash = w.tab.locator(".flash").first.inner_text()
    promoted = int(re.search(r"head \(version (\d+)\)", flash).group(1))  # type: ignore[union-attr]
    acc_promoted = (
        w.tab.locator(f"section.model.active tbody tr:has(td:text-is('{promoted}')) td").nth(3).inner_text()
    )
    undo = w.tab.locator("form[action='/admin/models/rollback'] button").inner_text()
    w.tab.locator("form[action='/admin/models/rollback'] button").click()
    w.tab.wait_for_load_state("networkidle")
    flash2 = w.tab.locator(".flash").first.inner_text()
    restored = int(re.search(r"from version (\d+)", flash2).group(1))  # type: ignore[union-attr]
    row = w.tab.locator(f"section.model.active tbody tr:has(td:text-is('{restored}')) td")
    came_from, acc_restored = row.nth(2).inner_text(), row.nth(3).inner_text()
    offers = w.tab.locator("form.head-change button").all_inner_texts()
    reapplies = [
        o for o in offers if o.startswith("Roll back") and re.search(rf"\bv{promoted}\b", o.split("(")[0])
    ]
    w.shot("models-after-rollback-1440")
    audit = w.page("/admin/audit", "audit")
    rolled = w.tab.locator("tr[data-action='rolled_back'] td").nth(2)
    sentence = rolled.inner_text() if rolled.count() else ""
    ok = (
        "rollback" in came_from
        and not reapplies
        and acc_promoted != "—"
        and acc_restored != "—"
        and sentence != ""
    )
    w.see(
        "6",
        f"promoted v{source} (head was v{head_before}) as v{promoted}, accuracy {acc_promoted}; "
        f"button {undo!r}; rollback made v{restored}: came from {came_from!r}, accuracy {acc_restored}; "
        f"then offered {offers}; "
        f"audit: {sentence!r}",
        ok,
        flashes=[flash, flash2],
    )
    cells = w.tab.locator("tbody tr td:nth-child(3)").all_inner_texts()
    json_like = [c for c in cells if c.lstrip().startswith("{") or '":' in c]
    w.see(
        "5",
        f"audit: {len(cells)} entries, JSON-looking: {len(json_like)}",
        not json_like,
        audit_sample=cells[:8],
    )
    w.obs["models_text"], w.obs["audit_text_len"] = len(text), len(audit)


def phone_and_audit(w: Walk) -> None:
    w.tab.set_viewport_size({"width": 390, "height": 844})
    w.page("/admin", "overview-390")
    boxes = w.tab.eval_on_selector_all(
        "header.top nav a",
        "els => els.map(e => { const r = e.getBoundingClientRect(); const n = e.closest('nav');"
        " return {text: e.textContent.trim(), left: r.left, right: r.right, visible: r.width > 0 &&"
        " r.right <= window.innerWidth && r.left >= 0, clipped: n.scrollWidth > n.clientWidth + 1}; })",
    )
    page_width = w.tab.evaluate("document.documentElement.scrollWidth")
    w.shot("overview-390")
    uncut = all(b["visible"] and not b["clipped"] for b in boxes) and len(boxes) == 7 and page_width <= 390
    w.see(
        "8",
        f"at 390 px: {sum(b['visible'] for b in boxes)}/7 links fully inside, rightmost edge "
        f"{max(b['right'] for b in boxes):.0f} px, page {page_width} px wide",
        uncut,
        nav_boxes=boxes,
    )
    w.tab.set_viewport_size({"width": 1440, "height": 900})
    w.tab.click("form.logout button")
    w.tab.wait_for_url(re.compile(r".*/admin/login.*"))
    w.obs["browser_relogin_s"] = round(log_in(w.tab, w.fleet.password), 2)
    w.page("/admin/audit", "audit-after-login")
    seen = {
        a: w.tab.locator(f"tr[data-action='{a}'] td").nth(2).inner_text()
        for a in ("login", "logout", "login_failed")
        if w.tab.locator(f"tr[data-action='{a}']").count()
    }
    w.see(
        "9", f"audit after logout and login: {seen}", "login" in seen and "logout" in seen, audit_logins=seen
    )
