"""`fleet demo --phones`: the coordinator on every interface with FLEET_PUBLIC_URL the LAN address, no
training target (the emulated phones stop at it), a join code from the admin API shown as a QR code in
the terminal; without --phones, one line says a phone can join."""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from fleet import demo_phones
from fleet.cli import app
from fleet.demo import DemoConfig, _server_env, run_demo
from tests.conftest import ADMIN, FEATURES


def test_the_lan_address_is_found_without_sending_anything_or_falls_back_with_a_warning(monkeypatch):
    address = demo_phones.lan_address()
    if address is not None:
        assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", address) and not address.startswith("127.")
    monkeypatch.setattr(demo_phones, "lan_address", lambda: "192.168.1.20")
    assert demo_phones.public_url(8765, Console(file=None)) == "http://192.168.1.20:8765"
    monkeypatch.setattr(demo_phones, "lan_address", lambda: None)
    console = Console(record=True, width=200)
    assert demo_phones.public_url(8765, console) == "http://127.0.0.1:8765"
    assert "a phone cannot reach it" in console.export_text()


def test_with_phones_the_coordinator_has_no_target_and_the_drift_demo_refuses_it(tmp_path):
    phones = _server_env(DemoConfig(phones=True, workdir=tmp_path), "k", "a", "p")
    assert "FLEET_TARGET_ACCURACY" not in phones
    assert _server_env(DemoConfig(workdir=tmp_path), "k", "a", "p")["FLEET_TARGET_ACCURACY"] == "0.92"
    refused = CliRunner().invoke(app, ["demo", "--phones", "--scenario", "drift"])
    assert refused.exit_code == 2 and "MNIST demo" in refused.output


def test_the_demo_asks_the_admin_api_for_a_code_and_draws_its_url(make_api, monkeypatch):
    api = make_api(public_url="http://192.168.1.20:8765")
    asked: list[dict[str, Any]] = []

    def post(url: str, **options: Any) -> httpx.Response:
        asked.append(options["json"])
        options.pop("timeout")  # the TestClient takes none
        return api.http.post(url.removeprefix("http://127.0.0.1:8765"), **options)

    monkeypatch.setattr(demo_phones.httpx, "post", post)
    joined = demo_phones.create_join_code("http://127.0.0.1:8765", ADMIN)
    assert asked == [{"minutes": 60, "max_devices": 5}]
    assert joined["url"] == f"http://192.168.1.20:8765/device/#join={joined['code']}"
    console = Console(record=True, width=200)
    demo_phones.show_join(console, joined)
    text = console.export_text()
    assert joined["url"] in text and "cannot be installed as an app" in text
    qr = demo_phones.terminal_qr(joined["url"]).splitlines()
    assert len(qr) > 15 and all(len(line) == len(qr[0]) for line in qr) and set("".join(qr)) <= set("█▀▄ ")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_a_phone_joins_the_demo_and_trains_on_after_the_emulated_phones_reach_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole demo with --phones: its printed join URL enrolls a device, which still gets tasks once the
    emulated phones have stopped at the target (the coordinator was given none)."""
    port = _free_port()
    cfg = DemoConfig(devices=3, minutes=1.0, target=0.15, port=port, workdir=tmp_path / "demo", linger=15)
    cfg = DemoConfig(**{**cfg.__dict__, "phones": True})  # the coordinator stays up 15 s after the run
    demo = threading.Thread(target=run_demo, args=(cfg,), daemon=True)
    demo.start()
    seen = ""
    deadline = time.monotonic() + 150
    while "The coordinator stays up" not in seen and time.monotonic() < deadline:
        time.sleep(0.5)
        seen += capsys.readouterr().out
    assert "The coordinator stays up" in seen, seen
    url = re.search(r"(http://\S+)/device/#join=([0-9A-Z-]+)", seen.replace("\n", ""))
    assert url is not None, seen
    base, code = url.group(1), url.group(2)
    assert not base.startswith("http://127.") or "no network address" in seen
    enrolled = httpx.post(f"{base}/v1/devices", json={"enrollment_key": code, "device_model": "Real phone"})
    assert enrolled.status_code == 201, enrolled.text
    headers = {"Authorization": f"Bearer {enrolled.json()['token']}"}
    asked = {"device_model": "Real phone", "features": FEATURES, "label_counts": [5] * 10}
    task = httpx.post(f"{base}/v1/tasks", json=asked, headers=headers, timeout=10)
    assert task.status_code in (201, 503) and task.json().get("reason") != "training_finished", task.text
    demo.join(timeout=60)  # the demo stops its coordinator after lingering
    assert not demo.is_alive()
