"""The console's server side without a browser: login, sessions, CSRF, settings that persist, downloads.

The browser tests (tests/test_console_browser.py) drive the same pages in chromium against a real
process; these pin the security and persistence rules quickly, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import csv
import io
import re
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import ENROLL, FEATURES, settings_for

warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
from starlette.testclient import TestClient  # noqa: E402

USER, PASSWORD = "admin", "a-long-enough-password"


@pytest.fixture
def console(tmp_path, database_url) -> Iterator[Any]:
    """Factory: a logged-out TestClient over a fresh app with a first-run console user."""
    from server.api.app import create_app

    clients: list[TestClient] = []

    def make(base_url: str = "http://127.0.0.1", **overrides: Any) -> TestClient:
        values = {
            "database_url": database_url,
            "console_user": USER,
            "console_password": PASSWORD,
            **overrides,
        }
        client = TestClient(create_app(settings_for(tmp_path, **values)), base_url=base_url)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def login(
    client: TestClient, password: str = PASSWORD, username: str = USER, next_path: str = "/admin"
) -> Any:
    form = client.get("/admin/login").text
    token = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    data = {"username": username, "password": password, "csrf_token": token, "next": next_path}
    return client.post("/admin/login", data=data, follow_redirects=False)


def csrf(client: TestClient) -> str:
    return re.search(r'name="csrf-token" content="([^"]+)"', client.get("/admin").text).group(1)


def test_login_sets_a_strict_httponly_session_cookie_and_logout_ends_it(console):
    client = console()
    answer = login(client)
    assert answer.status_code == 303 and answer.headers["location"] == "/admin"
    cookie = next(h for h in answer.headers.get_list("set-cookie") if h.startswith("fleet_session="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie
    assert client.get("/admin").status_code == 200
    session = client.cookies.get("fleet_session")
    assert (
        client.post("/admin/logout", data={"csrf_token": csrf(client)}, follow_redirects=False).status_code
        == 303
    )
    client.cookies.set("fleet_session", session, path="/admin")  # a stolen copy of the cookie
    assert client.get("/admin", follow_redirects=False).status_code == 303


def test_over_tls_the_cookie_is_secure(console):
    answer = login(console(base_url="https://127.0.0.1"))
    assert "Secure" in next(
        h for h in answer.headers.get_list("set-cookie") if h.startswith("fleet_session=")
    )


def test_a_login_without_the_form_token_is_refused(console):
    client = console()
    client.get("/admin/login")
    data = {"username": USER, "password": PASSWORD, "csrf_token": "guessed"}
    assert client.post("/admin/login", data=data, follow_redirects=False).status_code == 403


def test_login_goes_back_only_inside_the_console(console):
    assert login(console(), next_path="/admin/devices?page=1").headers["location"] == "/admin/devices?page=1"
    assert login(console(), next_path="//evil.example/admin").headers["location"] == "/admin"
    assert login(console(), next_path="https://evil.example").headers["location"] == "/admin"


def test_pages_data_and_charts_answer_once_logged_in(console):
    from server.console.charts import CHARTS
    from server.console.figures import DATASETS

    client = console()
    login(client)
    for path in ("", "/learning", "/devices", "/models", "/settings", "/privacy", "/audit"):
        page = client.get("/admin" + path)
        assert page.status_code == 200, path
        assert page.headers["content-security-policy"].startswith("default-src 'self'")
        assert page.headers["cache-control"] == "no-store"
    for name in DATASETS:
        assert client.get(f"/admin/data/{name}.json").json()["columns"] == list(DATASETS[name].columns)
    for name in CHARTS:
        figure = client.get(f"/admin/charts/{name}").json()
        assert {"data", "layout", "points"} <= set(figure)
    assert client.get("/admin/devices/models/nobody").status_code == 404
    assert client.get("/admin/data/nothing.json").status_code == 404


def test_csv_download_holds_the_chart_rows(console):
    client = console()
    login(client)
    api = client.app.state.coordinator
    for version, accuracy in ((3, 0.5), (7, 0.75)):
        api.record_evaluation(api.run.model_id, version, accuracy, 1.0)
    rows = list(csv.reader(io.StringIO(client.get("/admin/data/accuracy.csv").text)))
    assert rows[0] == ["version", "accuracy", "loss", "at", "reference"]
    assert [(r[0], r[1]) for r in rows[1:]] == [("3", "0.5"), ("7", "0.75")]
    chart = client.get("/admin/charts/accuracy-versions").json()
    assert chart["points"] == 2 and chart["data"][0]["y"] == [0.5, 0.75]


def test_state_changes_need_the_csrf_token(console):
    client = console()
    login(client)
    coordinator = client.app.state.coordinator
    assert client.post("/admin/training/pause", data={}).status_code == 403
    assert client.post("/admin/training/pause", data={"csrf_token": "x" * 43}).status_code == 403
    assert coordinator.run.status == "training"
    assert client.post("/admin/training/pause", headers={"X-CSRF-Token": csrf(client)}).status_code == 200
    assert coordinator.run.status == "paused"
    entry = next(e for e in client.app.state.admin_store.audit_entries() if e.action == "status:paused")
    assert entry.actor == USER and (entry.detail["old"], entry.detail["new"]) == ("training", "paused")


def test_anonymous_posts_change_nothing(console):
    client = console()
    answer = client.post("/admin/training/pause", data={"csrf_token": "x"}, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/admin/login")
    assert client.app.state.coordinator.run.status == "training"


def test_settings_apply_at_once_survive_a_restart_and_are_audited(console):
    client = console()
    login(client)
    token = csrf(client)
    form = {"csrf_token": token, "learning_rate": "0.125", "time_slo_ms": "750", "rate_limit_burst": "77"}
    form["health_no_push_seconds"] = "90"  # an operator whose devices train only while charging
    answer = client.post("/admin/settings", data=form, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    coordinator = client.app.state.coordinator
    assert coordinator.health_policy.no_push_seconds == 90
    assert coordinator.run.strategy.describe()["learning_rate"] == 0.125
    assert coordinator.profiler.time_slo_ms == 750
    assert client.app.state.rate_limiter.burst == 77
    audit = client.get("/admin/audit").text
    assert "settings_changed" in audit and "0.125" in audit
    client.__exit__(None, None, None)

    restarted = console(console_user=None, console_password=None)  # same database
    assert restarted.app.state.coordinator.run.strategy.describe()["learning_rate"] == 0.125
    assert restarted.app.state.coordinator.profiler.time_slo_ms == 750
    assert restarted.app.state.rate_limiter.burst == 77
    assert restarted.app.state.coordinator.health_policy.no_push_seconds == 90


@pytest.mark.parametrize(
    "form",
    [{"learning_rate": "-1"}, {"learning_rate": "fast"}, {"min_batch": "50", "max_batch": "10"},
     {"strategy": "bogus"}, {"percentile": "101"}, {"health_failing_share": "1.5"}],
)  # fmt: skip
def test_invalid_settings_change_nothing(console, form):
    client = console()
    login(client)
    coordinator = client.app.state.coordinator
    before = (
        coordinator.run.strategy.describe(),
        coordinator.profiler.min_batch,
        coordinator.profiler.max_batch,
        coordinator.health_policy,
    )
    answer = client.post("/admin/settings", data={"csrf_token": csrf(client), **form})
    assert answer.status_code == 422 and "Nothing was changed" in answer.text
    after = (
        coordinator.run.strategy.describe(),
        coordinator.profiler.min_batch,
        coordinator.profiler.max_batch,
        coordinator.health_policy,
    )
    assert after == before
    assert client.app.state.admin_store.overrides() == {}


def test_a_strategy_change_applies_and_keeps_training(console):
    client = console()
    login(client)
    answer = client.post(
        "/admin/settings", data={"csrf_token": csrf(client), "strategy": "fedbuff", "k": "3"}
    )
    assert answer.status_code == 200 and "saved" in answer.text
    described = client.app.state.coordinator.run.strategy.describe()
    assert described["strategy"] == "fedbuff" and described["k"] == 3


def test_the_strategy_shows_only_its_own_fields_and_wrappers_are_a_list(console):
    client = console()
    login(client)
    page = client.get("/admin/settings").text
    assert 'name="strategy.clip_factor"' in page and 'name="strategy.percentile"' not in page
    post = {"csrf_token": csrf(client), "strategy": "dynsgd-clip", "strategy.clip_factor": "2",
            "wrappers.add": "kardam"}  # fmt: skip
    assert "saved" in client.post("/admin/settings", data=post).text
    coordinator = client.app.state.coordinator
    built = coordinator.run.strategy
    assert type(built).__name__ == "Kardam" and built.inner.inner.factor == 2.0
    page = client.get("/admin/settings").text
    assert 'name="wrappers.0.f"' in page
    bad = {"csrf_token": csrf(client), "wrappers.0.name": "kardam", "wrappers.0.f": "-1"}
    answer = client.post("/admin/settings", data=bad)
    assert answer.status_code == 422 and "Nothing was changed" in answer.text
    assert "wrappers.0.f" in answer.text
    assert coordinator.run.strategy is built
    wrong = {"csrf_token": csrf(client), "strategy": "adasgd", "clip_factor": "2"}  # not adasgd's
    assert client.post("/admin/settings", data=wrong).status_code == 422
    switch = {"csrf_token": csrf(client), "strategy": "adasgd", "strategy.clip_factor": "2",
              "strategy.k": "2", "wrappers.0.name": "kardam", "wrappers.0.f": "1",
              "wrappers.0.remove": "true"}  # fmt: skip
    assert "saved" in client.post("/admin/settings", data=switch).text
    described = coordinator.run.strategy.describe()
    assert described["strategy"] == "adasgd" and described["k"] == 2
    assert 'name="strategy.percentile"' in client.get("/admin/settings").text
    client.__exit__(None, None, None)

    restarted = console(console_user=None, console_password=None)  # the saved structure, after a restart
    settings = restarted.app.state.settings
    assert (settings.strategy.name, settings.strategy.k, settings.wrappers) == ("adasgd", 2, [])


def test_wrong_passwords_are_refused_then_throttled(console):
    client = console(login_burst=3)
    codes = [login(client, password="wrong-wrong-wrong").status_code for _ in range(4)]
    assert codes == [401, 401, 401, 429]
    assert login(client).status_code == 429  # the right password too, until the bucket refills
    entries = client.app.state.admin_store.audit_entries()
    assert sum(e.action == "login_failed" for e in entries) == 3


def test_an_unknown_user_is_refused_like_a_wrong_password(console):
    assert login(console(), username="nobody").status_code == 401


def test_console_off_serves_nothing_and_training_goes_on(console):
    client = console(console=False)
    assert client.get("/admin", follow_redirects=False).status_code == 404
    assert client.get("/admin/login").status_code == 404
    response = client.post("/v1/devices", json={"enrollment_key": ENROLL, "device_model": "Pixel"})
    assert response.status_code == 201


def test_a_device_model_page_shows_the_profiler(console):
    client = console()
    login(client)
    coordinator = client.app.state.coordinator
    coordinator.profiler.observe("Pixel 7", {"available_memory": 1e9, "total_memory": 4e9}, 32, 120.0, None)
    # a device model known only to the profiler still has a page (no measurements yet)
    page = client.get("/admin/devices/models/Pixel%207")
    assert page.status_code == 200 and "Pixel 7" in page.text


def test_model_downloads(console):
    client = console()
    login(client)
    coordinator = client.app.state.coordinator
    model_id = coordinator.run.model_id
    train = client.get(f"/admin/models/{model_id}/train.onnx")  # the inference model: test_console_models
    assert train.status_code == 200 and train.content == coordinator.catalog.graph(model_id, "train")
    params = client.get(f"/admin/models/{model_id}/versions/0.bin")
    np.testing.assert_array_equal(
        np.frombuffer(params.content, "<f4"), coordinator.catalog.params(model_id, 0)
    )
    assert client.get(f"/admin/models/{model_id}/versions/99.bin").status_code == 404
    assert client.get(f"/admin/models/{model_id}/other.onnx").status_code == 404


def test_an_invalid_bundle_upload_is_refused_and_the_model_stays(console):
    client = console()
    login(client)
    before = client.app.state.coordinator.run.model_id
    files = {"bundle": ("b.zip", b"not a zip", "application/zip")}
    answer = client.post("/admin/models", data={"csrf_token": csrf(client)}, files=files)
    assert answer.status_code == 200 and "invalid bundle" in answer.text
    assert client.app.state.coordinator.run.model_id == before


def test_create_user_command(tmp_path, monkeypatch):
    from fleet.cli import app

    monkeypatch.setenv("FLEET_DATA_DIR", str(tmp_path))
    runner = CliRunner()
    made = runner.invoke(app, ["admin", "create-user", "ops", "--password-stdin"], input="long-password-1\n")
    assert made.exit_code == 0, made.output
    again = runner.invoke(app, ["admin", "create-user", "ops", "--password-stdin"], input="long-password-1\n")
    assert again.exit_code == 2 and "already exists" in again.output
    short = runner.invoke(app, ["admin", "create-user", "ops2", "--password-stdin"], input="short\n")
    assert short.exit_code == 2 and "at least" in short.output


def test_the_privacy_page_shows_each_device_epsilon_against_the_budget(console):
    client = console(  # q = 48/192: ε 0.97 after one task, the next beyond the budget of 1
        dp=True,
        dp_noise_multiplier=3.0,
        dp_epsilon_budget=1.0,
        initial_model="mlp",
        min_batch=48,
        max_batch=48,
    )
    login(client)
    assert "Differential privacy is off" not in client.get("/admin/privacy").text
    enrolled = client.post("/v1/devices", json={"enrollment_key": ENROLL, "device_model": "Pixel"}).json()
    device = {"Authorization": f"Bearer {enrolled['token']}"}
    body = {"features": FEATURES, "local_examples": 192}  # a bucket value
    codes = [client.post("/v1/tasks", json=body, headers=device).status_code for _ in range(40)]
    assert 201 in codes and codes[-1] == 503
    page = client.get("/admin/privacy").text
    assert enrolled["device_id"] in page and "dpsgd-poisson-gaussian/1" in page and "· spent" in page
    rows = client.get("/admin/data/privacy.json").json()["rows"]
    assert len(rows) == 1 and rows[0][0] == enrolled["device_id"] and rows[0][4] <= 1.0 and rows[0][6] is True
    figure = client.get("/admin/charts/privacy").json()
    assert figure["data"][0]["y"] == [rows[0][4]] and figure["layout"]["shapes"][0]["y0"] == 1.0
    plain = console()
    login(plain)
    assert "Differential privacy is off" in plain.get("/admin/privacy").text


def test_the_privacy_page_and_the_docs_state_the_same_guarantee(console):
    """docs/privacy.md quotes ``STATEMENT`` word for word and the console shows it (issue 27)."""
    import html
    from pathlib import Path

    from fleet_protocol.accounting import STATEMENT

    docs = Path(__file__).resolve().parents[1].joinpath("docs", "privacy.md").read_text()
    client = console(dp=True, initial_model="mlp")
    login(client)
    page = html.unescape(client.get("/admin/privacy").text)
    for heading, text in STATEMENT:
        assert f"- **{heading}.** {text}" in docs, heading
        assert heading in page and text in page, heading
    assert "replace-one" in docs.lower() and "1e-8" in docs
