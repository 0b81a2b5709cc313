"""Issue 29's hardening, fast: the login back-off (no lock-out from elsewhere), trusted proxies only, the
Origin check on console forms, escaped device-model links, audited logins, the operations token and a
login that does not block the event loop. The real-socket checks (a slow body, X-Forwarded-For through
`fleet serve`) are in tests/test_hardening_server.py."""

from __future__ import annotations

import base64
import re
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from server.api.bodylimit import BodyLimit
from tests.conftest import ENROLL, settings_for

warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
from starlette.testclient import TestClient  # noqa: E402

USER, PASSWORD = "admin", "a-long-enough-password"
OPS = "an-operations-token"
CONSOLE_POSTS = (  # every form of the console
    "/admin/login", "/admin/logout", "/admin/training/pause", "/admin/settings", "/admin/keys",
    "/admin/keys/k/revoke", "/admin/devices/d/revoke", "/admin/models", "/admin/models/m/versions/1/promote",
    "/admin/models/rollback", "/admin/models/m/versions/1/note",
)  # fmt: skip


@pytest.fixture
def console(tmp_path, database_url) -> Iterator[Any]:
    """Factory: a TestClient connecting from 127.0.0.1 to a fresh app with a first console user."""
    from server.api.app import create_app

    clients: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        values = {"database_url": database_url, "console_user": USER, "console_password": PASSWORD}
        values.update(overrides)
        app = create_app(settings_for(tmp_path, **values))
        client = TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def login(client: TestClient, password: str = PASSWORD, *, via: str | None = None) -> Any:
    """A login form post; ``via``: the address a proxy says the browser has (X-Forwarded-For)."""
    headers = {"X-Forwarded-For": via} if via else {}
    form = client.get("/admin/login", headers=headers).text
    token = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    data = {"username": USER, "password": password, "csrf_token": token, "next": "/admin"}
    return client.post("/admin/login", data=data, headers=headers, follow_redirects=False)


def csrf(client: TestClient) -> str:
    return re.search(r'name="csrf-token" content="([^"]+)"', client.get("/admin").text).group(1)


def test_failures_from_other_addresses_do_not_lock_the_admin_out(console):
    client = console(trusted_proxies="127.0.0.1")  # a local proxy passes on each browser's address
    for round_ in range(3):
        for i in range(8):
            assert login(client, "wrong-wrong-wrong", via=f"203.0.113.{i}").status_code == 401, (round_, i)
    attacker = [login(client, "wrong-wrong-wrong", via="198.51.100.66").status_code for _ in range(8)]
    assert attacker[:2] == [401, 401] and attacker[-1] == 429  # its own failures slow the attacker down
    assert login(client, via="192.0.2.10").status_code == 303  # the admin, from a fresh address


def test_wrong_passwords_make_the_next_attempt_wait_longer_and_longer():
    from server.ratelimit import LoginThrottle

    now = [0.0]
    throttle = LoginThrottle(rate=1000.0, burst=1000, free_failures=3, max_backoff=60.0, clock=lambda: now[0])
    waits = []
    for _ in range(10):
        assert throttle.wait("admin", "10.0.0.1") == 0.0
        throttle.failed("admin", "10.0.0.1")
        waits.append(throttle.wait("admin", "10.0.0.1"))
        now[0] += waits[-1]
    assert waits == [0.0, 0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]  # doubling, capped
    assert throttle.wait("admin", "10.0.0.2") == 0.0  # the same user from elsewhere
    assert throttle.wait("bob", "10.0.0.1") == 0.0  # an address gets 4 × 3 failures over all users
    throttle.failed("bob", "10.0.0.1")
    throttle.failed("bob", "10.0.0.1")
    assert throttle.wait("carol", "10.0.0.1") == 1.0
    throttle.succeeded("admin", "10.0.0.1")
    now[0] += 1.0
    assert throttle.wait("admin", "10.0.0.1") == 0.0  # a right password ends the user's back-off


def test_forwarded_for_is_believed_only_from_trusted_proxies(console):
    client = console(login_burst=3)  # FLEET_TRUSTED_PROXIES unset: 127.0.0.1 is no proxy
    codes = [login(client, "wrong-wrong-wrong", via=f"203.0.113.{i}").status_code for i in range(4)]
    assert codes == [401, 401, 401, 429]  # a rotating header does not escape the throttle
    assert client.app.state.admin_store.audit_entries()[0].detail["address"] == "127.0.0.1"


def test_fleet_serve_turns_uvicorns_own_proxy_trust_off(monkeypatch, tmp_path):
    import uvicorn

    from fleet.cli import app

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: calls.append(kwargs))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["serve", "--port", "8999"])
    assert result.exit_code == 0, result.output
    assert calls[0]["proxy_headers"] is False  # uvicorn's default believes X-Forwarded-For from 127.0.0.1


def test_trusted_proxies_must_be_addresses_or_networks(tmp_path):
    with pytest.raises(ValueError, match="not an address"):
        settings_for(tmp_path, trusted_proxies="127.0.0.1, proxy.local")
    assert settings_for(tmp_path, trusted_proxies="10.0.0.0/8, ::1").proxy_list() == ["10.0.0.0/8", "::1"]


def test_console_posts_from_another_site_are_refused_whatever_the_token(console):
    client = console()
    assert login(client).status_code == 303
    token = csrf(client)
    evil = [{"Origin": "https://evil.example"}, {"Referer": "https://evil.example/x"}, {"Origin": "null"}]
    for path in CONSOLE_POSTS:
        for headers in evil:
            answer = client.post(path, data={"csrf_token": token}, headers=headers, follow_redirects=False)
            assert answer.status_code == 403, (path, headers, answer.status_code)
    run = client.app.state.coordinator.run
    assert run.status == "training"
    own = {"Origin": "http://127.0.0.1"}
    paused = client.post("/admin/training/pause", data={"csrf_token": token}, headers=own)
    assert paused.status_code == 200 and run.status == "paused"
    # no Origin and no Referer: not a browser form; the CSRF token still decides
    resumed = client.post("/admin/training/resume", data={"csrf_token": token})
    assert resumed.status_code == 200 and run.status == "training"


@pytest.mark.parametrize("name", ["Pixel 7/Pro", "Galaxy?S7", "Moto 50% #1"])
def test_a_device_model_name_links_to_its_own_page(console, name):
    client = console()
    enrolled = client.post("/v1/devices", json={"enrollment_key": ENROLL, "device_model": name})
    assert enrolled.status_code == 201
    memory = {"available_memory": 1e9, "total_memory": 4e9}
    client.app.state.coordinator.profiler.observe(name, memory, 32, 120.0, None)  # a profile to show
    login(client)
    page = client.get("/admin/devices").text
    links = re.findall(r'href="(/admin/devices/models/[^"]+)"', page)
    assert len(links) == 1
    answer = client.get(links[0].replace("&amp;", "&"))
    assert answer.status_code == 200
    assert f"<h1>{name}</h1>" in answer.text.replace("&#34;", '"').replace("&amp;", "&")


def test_logins_and_logouts_are_audited_as_sentences(console):
    client = console()
    assert login(client).status_code == 303
    client.post("/admin/logout", data={"csrf_token": csrf(client)}, follow_redirects=False)
    entries = {e.action: e for e in client.app.state.admin_store.audit_entries()}
    assert entries["login"].actor == USER and entries["logout"].actor == USER
    assert entries["login"].detail["summary"] == "admin logged in from 127.0.0.1"
    assert entries["logout"].detail["summary"] == "admin logged out from 127.0.0.1"


def test_metrics_and_the_docs_need_the_operations_token_once_set(console):
    assert console().get("/metrics").status_code == 200  # off by default
    client = console(ops_token=OPS)
    for path in ("/metrics", "/docs", "/redoc", "/openapi.json", "/docs-assets/swagger-ui.css"):
        refused = client.get(path)
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic"), path
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401, path
    assert client.get("/metrics", headers={"Authorization": f"Bearer {OPS}"}).status_code == 200
    basic = base64.b64encode(f"prometheus:{OPS}".encode()).decode()
    assert client.get("/openapi.json", headers={"Authorization": f"Basic {basic}"}).status_code == 200
    assert client.get("/v1/health").status_code == 200  # the rest of the API is not behind it


def test_a_slow_password_hash_does_not_block_other_requests(console):
    client = console()
    console_state = client.app.state.console
    original, started, release = console_state.accounts.verify, threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def slow_verify(username: str, password: str) -> bool:
        started.set()
        outcome["released"] = release.wait(10)  # times out only if the event loop waits for us
        return original(username, password)

    console_state.accounts.verify = slow_verify
    login_thread = threading.Thread(target=lambda: outcome.setdefault("login", login(client)))
    login_thread.start()
    assert started.wait(10)
    began = time.monotonic()
    assert client.get("/v1/health").status_code == 200  # served while the hash runs
    elapsed = time.monotonic() - began
    release.set()
    login_thread.join(20)
    assert outcome["released"] and elapsed < 5
    assert outcome["login"].status_code == 303


def test_a_body_that_does_not_arrive_in_time_gets_408():
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"read"})

    async def trickle() -> dict[str, Any]:
        await anyio.sleep(0.1)
        return {"type": "http.request", "body": b"x", "more_body": True}

    async def record(message: dict[str, Any]) -> None:
        sent.append(message)

    async def main() -> float:
        began = anyio.current_time()
        scope = {"type": "http", "headers": [(b"content-length", b"1000")], "method": "POST", "path": "/"}
        with anyio.fail_after(10):
            await BodyLimit(app, max_bytes=10_000, timeout_s=0.5)(scope, trickle, record)
        return anyio.current_time() - began

    elapsed = anyio.run(main)
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [408]
    assert (b"connection", b"close") in sent[0]["headers"] and 0.5 <= elapsed < 2


def test_a_streamed_body_over_the_limit_gets_413_not_a_parse_error(console):
    client = console(max_body_bytes=1000)

    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b"x" * 500

    answer = client.post("/v1/devices", content=chunks(), headers={"Content-Type": "application/json"})
    assert answer.status_code == 413
