"""Pages that answer questions (issue 29, part 3): which device model misses its SLO (worst first), settings
and figures in words and units, only the panels the strategy feeds, audit entries in sentences, live
regions on every page and a page weight the chart bundle keeps small. In process; the browser side
(sorting, the 390 px navigation, live refresh) is in tests/test_console_browser.py."""

from __future__ import annotations

import html
import re
from types import SimpleNamespace
from typing import Any

import pytest

from server.console import labels
from server.console.figures import Figures
from server.console.sentences import audit_sentence
from tests.test_console import console, csrf, login  # noqa: F401 (``console``: the fixture)

PAGES = ("", "/learning", "/devices", "/join", "/models", "/settings", "/privacy", "/audit")
SLO = 1000.0


def record(batch: int, ms: float, predicted: float = 1000.0) -> SimpleNamespace:
    return SimpleNamespace(batch_size=batch, compute_time_ms=ms, predicted_time_ms=predicted)


# per device model: (batch sizes, measured ms); the Galaxy S6 gets small batches and overruns the SLO
FLEET = {
    "Galaxy S10": ([908] * 20, [900.0] * 19 + [1100.0]),  # 95% within: meets it
    "Galaxy S6": ([136, 138, 140, 137] * 5, [1200.0] * 12 + [950.0] * 8),  # 40% within: the worst
    "Pixel 4": ([400] * 20, [980.0] * 16 + [1300.0] * 4),  # 80% within: misses it too
}


def fake_store(measured: dict[str, tuple[list[int], list[float]]]) -> SimpleNamespace:
    """The three reads Figures.device_models makes, answered from ``measured`` (and one idle model)."""
    counts = {name: (2, 1, 1_700_000_000.0) for name in [*measured, "Moto G (no tasks)"]}
    return SimpleNamespace(
        device_model_counts=lambda now: counts,
        measurement_counts=lambda: {name: (len(b), 0.0) for name, (b, _) in measured.items()},
        measurements=lambda name, limit: [record(b, t) for b, t in zip(*measured[name], strict=True)][:limit],
    )


def test_device_models_come_worst_first_with_batch_sizes_and_slo_shares():
    core = SimpleNamespace(store=fake_store(FLEET), run=None, profiler=SimpleNamespace(time_slo_ms=SLO))
    rows = Figures(core).device_models({})
    assert [r[0] for r in rows] == ["Galaxy S6", "Pixel 4", "Galaxy S10", "Moto G (no tasks)"]
    s6, pixel, s10, idle = rows
    assert (s6[5], s6[6], s6[7]) == (137, 136, 140)  # batch p50, min, max
    assert s10[5] == 908
    assert (s6[8], pixel[8], s10[8]) == (40.0, 80.0, 95.0)  # % of tasks within the SLO
    assert s6[9] == pytest.approx(20.0) and s10[9] == pytest.approx(-10.0)  # p90 over the SLO, % of it
    assert (s6[13], pixel[13], s10[13]) == (True, True, False)  # misses the SLO?
    assert idle[4] == 0 and idle[13] is None


def test_the_devices_page_leads_with_the_worst_model_and_flags_misses(console, monkeypatch):  # noqa: F811
    client = console()
    login(client)
    store = client.app.state.coordinator.store
    for name, read in vars(fake_store(FLEET)).items():
        monkeypatch.setattr(store, name, read)
    page = client.get("/admin/devices").text
    order = [html.unescape(n) for n in re.findall(r'<tr[^>]*data-device-model="([^"]+)"', page)]
    assert order == ["Galaxy S6", "Pixel 4", "Galaxy S10", "Moto G (no tasks)"]
    assert page.index("Galaxy S6") < page.index('data-chart="slo"')  # the table leads the page
    assert page.count('class="bad">misses') == 2 and page.count('class="good">meets') == 1
    assert "137 (136–140)" in page and "40%" in page
    assert client.get("/admin/data/device_models.json").json()["rows"][0][0] == "Galaxy S6"


def test_settings_read_as_words_with_the_effective_default(console):  # noqa: F811
    client = console(strategy="fedbuff-equal")
    login(client)
    page = client.get("/admin/settings").text
    shown = re.findall(r'<label for="f-([^"]+)">([^<]+)</label>', page)
    assert len(shown) > 15
    for name, text in shown:
        assert "_" not in text and text.strip() != name.split(".")[-1], (name, text)
    assert "Time SLO per task (ms)" in page and "Learning rate γ" in page
    assert "Degraded after no push for (s)" in page  # the health thresholds are the operator's too
    rate = client.app.state.coordinator.run.strategy.learning_rate
    assert f'placeholder="{labels.number(rate)} (default)"' in page  # not just "default"
    assert f"now {labels.number(rate)} (the strategy's default) · γ" in html.unescape(page)
    assert 'value="1000"' in page  # the SLO as the form parses it back, not 1000.0


def test_numbers_read_with_units():
    assert labels.number(1000.0) == "1,000" and labels.number(0.2) == "0.2"
    assert labels.number(1e-5) == "1e-05" and labels.number(12345.6) == "12,346"
    assert labels.nbytes(2.24e10) == "22.4 GB" and labels.nbytes(512) == "512 B"
    assert labels.duration_ms(1000.0) == "1,000 ms (1 s)" and labels.duration_ms(850) == "850 ms"
    assert labels.features({"available_memory": 2.24e10, "temperature": 41.5, "cpu_freq_sum": None}) == [
        ("Available memory", "22.4 GB"),
        ("Temperature", "41.5 °C"),
    ]
    energy = labels.features({"energy_per_cpu_time": 0.00601})
    assert energy == [("Energy per CPU second", "0.00601 % battery")]


def test_fedbuff_equal_hides_the_panels_of_other_strategies(console):  # noqa: F811
    client = console(strategy="fedbuff-equal")
    login(client)
    page = client.get("/admin/learning").text
    assert 'data-chart="similarity"' not in page and "τ_thres" not in page
    assert "warmup_factor" not in page and "Warm-up factor now" in page  # a summary, not the state dict
    tau = client.get("/admin/charts/tau").json()
    assert [t["name"] for t in tau["data"]] == ["staleness"] and not tau["layout"]["showlegend"]
    adasgd = console(strategy="adasgd")
    login(adasgd)
    page = adasgd.get("/admin/learning").text
    assert 'data-chart="similarity"' in page and "τ_thres now" in page


def test_audit_entries_read_as_sentences(console):  # noqa: F811
    client = console()
    login(client)
    post = {"csrf_token": csrf(client), "strategy.learning_rate": "0.0625", "time_slo_ms": "1500"}
    assert "saved" in client.post("/admin/settings", data=post).text
    page = client.get("/admin/audit").text
    assert "Learning rate γ from the default to 0.0625" in page
    assert "changed Time SLO per task (ms) from 1,000 to 1,500" in page
    assert "admin logged in from" in page and "{&#34;" not in page and '{"' not in page


@pytest.mark.parametrize(
    ("action", "detail", "sentence"),
    [
        ("device_revoked", {"device_id": "d1"}, "revoked device d1: its token stopped working"),
        ("enrollment_key_created", {"key_id": "k1", "name": "lab"}, "created the enrollment key “lab” (k1)"),
        ("rolled_back", {"old": {"model_id": "m", "version": 4},
                         "new": {"model_id": "m", "version": 5, "params_of": 2}},
         "rolled back m version 4 to the parameters of version 2 (now m version 5)"),
        ("status:paused", {"model_id": "m", "version": 3, "old": "training"},
         "set training of m to paused (was training) at version 3"),
        ("login", {"summary": "alice logged in from 10.0.0.7"}, "alice logged in from 10.0.0.7"),
        ("something_new", {"count": 3}, "Something new: count 3"),
    ],
)  # fmt: skip
def test_each_audit_action_has_a_sentence(action: str, detail: dict[str, Any], sentence: str):
    assert audit_sentence(action, detail) == sentence


def test_every_page_refreshes_and_weighs_little(console):  # noqa: F811
    client = console()
    login(client)
    for path in PAGES:
        page = client.get("/admin" + path).text
        static = "Differential privacy is off" in page  # DP cannot be turned on while it runs
        assert static or re.search(r"data-(live|chart|overview)\b", page), path  # the timer refreshes it
        assets = re.findall(r'<(?:script src|link rel="stylesheet" href)="(/admin/static/[^"]+)"', page)
        weight = len(page.encode()) + sum(len(client.get(a).content) for a in assets)
        bound = 1_400_000 if "plotly" in " ".join(assets) else 100_000  # the basic bundle is 1.2 MB
        assert weight < bound, (path, weight)
    assert "plotly" not in " ".join(re.findall(r'<script src="([^"]+)"', client.get("/admin/audit").text))
    zipped = client.get("/admin/static/plotly-basic.min.js", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip" and int(zipped.headers["content-length"]) < 450_000


def test_the_model_badge_says_its_state_once(console):  # noqa: F811
    client = console()
    login(client)
    page = client.get("/admin/models").text
    assert "training · training" not in page
    assert re.search(r'<span class="badge">(training|head · paused)</span>', page)


def test_no_static_file_names_a_cdn():
    """The console's scripts and styles come from the coordinator: nothing it serves points at a CDN."""
    import re
    from pathlib import Path

    import server.console

    static = Path(server.console.__file__).parent / "static"
    # a URL or a bare host name: cdn.example, jsdelivr, unpkg, cdnjs
    cdn = re.compile(rb"(?i)\bcdn\.[\w.-]+|[\w.-]*jsdelivr[\w./-]*|unpkg[\w./-]*|cdnjs[\w./-]*")
    found = {p.name: cdn.findall(p.read_bytes()) for p in static.rglob("*") if p.is_file()}
    assert not {name: urls for name, urls in found.items() if urls}
