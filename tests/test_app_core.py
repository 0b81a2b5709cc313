"""The app's engine (client/app without Kivy) against a real coordinator process: settings, drawings, the
served model, and every fault the status screen must explain while the worker backs off."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest

from client._ledger import LEDGER_FILE
from client._onnx_session import InferenceSession
from client._platform import backends
from client._state import INSTALL_FILE
from client.app.controller import STATE_DIR, AppController
from client.app.drawing import Drawings, strokes_to_image
from client.app.settings import (
    AppSettings,
    load_settings,
    parse_enrollment_link,
    save_settings,
)
from sim.data import write_shards
from tests.android_standins import StandInBridge
from tests.processes import ADMIN, ENROLL, ServerProcess, free_port

pytestmark = pytest.mark.slow


def until(check: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    tmp = tmp_path_factory.mktemp("app-core")
    shards, _ = write_shards(tmp / "data", devices=2, partition="iid", seed=4)
    with ServerProcess(tmp / "server", max_batch=32, time_slo_ms=300, k=1) as server:  # a version a push
        yield server, shards[0]


def app(tmp: Path, url: str, shard: Path | None, **options: object) -> AppController:
    control = AppController(tmp / "app", backoff_max=1.0, **options)  # type: ignore[arg-type]
    settings = AppSettings(server_url=url, enrollment_key=ENROLL, data_path=str(shard or ""))
    control.update_settings(settings)
    return control


def admin(server: ServerProcess, method: str, path: str, **kw: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    return httpx.request(method, f"{server.url}{path}", headers=headers, timeout=10, **kw)  # type: ignore[arg-type]


# --- settings, drawings ---------------------------------------------------------------------------


def test_settings_survive_a_crash_mid_save_and_a_garbled_file(tmp_path: Path, monkeypatch) -> None:
    saved = AppSettings(server_url="https://fleet.example.org", enrollment_key="k", min_battery_percent=40)
    save_settings(tmp_path, saved)
    assert (tmp_path / "settings.json").stat().st_mode & 0o777 == 0o600

    def crash(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("client._state.os.replace", crash)  # the atomic write save_settings uses
    with pytest.raises(OSError):
        save_settings(tmp_path, replace(saved, server_url="https://other.example.org"))
    monkeypatch.undo()
    assert load_settings(tmp_path) == saved  # the old file is whole, no temporary left behind
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]
    (tmp_path / "settings.json").write_text('{"server_url": 5, "min_battery_percent": 50, "bogus": 1}')
    assert load_settings(tmp_path) == AppSettings(min_battery_percent=50)
    (tmp_path / "settings.json").write_text("{not json")
    assert load_settings(tmp_path) == AppSettings()


def test_secrets_are_masked_and_links_parsed() -> None:
    settings = AppSettings(server_url="https://f.example", enrollment_key="sesame", device_token="tok-123")
    assert "sesame" not in repr(settings) and "tok-123" not in repr(settings)
    assert parse_enrollment_link("fleet://enroll?server=https://f.example:8443/&key=abc") == (
        "https://f.example:8443",
        "abc",
    )
    assert parse_enrollment_link("https://f.example/join?enrollment_key=xyz") == ("https://f.example", "xyz")
    assert parse_enrollment_link("https://f.example/join") is None
    assert parse_enrollment_link("fleet://enroll?key=abc") is None  # no coordinator in the link
    join = "http://192.168.1.20:8000/device/#join=7K3M-QX9B-2HWD-N4TF-8RZ0"  # a console join code's link
    assert parse_enrollment_link(join) == ("http://192.168.1.20:8000", "7K3M-QX9B-2HWD-N4TF-8RZ0")
    assert parse_enrollment_link("https://f.example/fleet/device/#join=C") == ("https://f.example/fleet", "C")
    assert parse_enrollment_link("https://f.example/device/") is None
    moved = settings.with_server("https://g.example", "sesame")
    assert moved.device_token == "" and moved.token_server == ""


def test_a_stroke_becomes_an_mnist_like_image(tmp_path: Path) -> None:
    image = strokes_to_image([[(100, 400), (100, 300), (101, 0)]])  # a tall "1", y up
    assert image.shape == (28, 28) and image.dtype == np.float32
    assert image.min() >= 0.0 and image.max() <= 1.0
    rows, cols = np.nonzero(image > 0.5)
    assert rows.min() >= 3 and rows.max() <= 24  # scaled into the 20-pixel box
    assert abs(np.average(np.indices(image.shape)[1], weights=image) - 13.5) < 1.0  # centred
    assert not strokes_to_image([]).any()
    drawings = Drawings(tmp_path)
    drawings.add(image, 1)
    assert Drawings(tmp_path).counts()[1] == 1  # kept on disk
    with pytest.raises(ValueError):
        drawings.add(image, 12)


# --- against the coordinator ----------------------------------------------------------------------


def test_the_app_trains_saves_its_token_and_never_logs_it(coordinator, tmp_path: Path, caplog) -> None:
    server, shard = coordinator
    caplog.set_level(logging.DEBUG)
    control = app(tmp_path, server.url, shard)
    try:
        control.start()
        until(lambda: control.status().done >= 3, 30, "three tasks")
        rows = control.status().tasks
        assert all(r.slo_time_ms == 300 and r.time_ms > 0 and r.energy is not None for r in rows)
    finally:
        control.close()
    token = load_settings(tmp_path / "app").device_token
    assert token and load_settings(tmp_path / "app").token_server == server.url
    assert token not in caplog.text and ENROLL not in caplog.text
    again = AppController(tmp_path / "app")  # a restart reuses the device, no new enrollment
    devices = admin(server, "GET", "/v1/admin/stats").json()["devices"]
    try:
        again.start()
        until(lambda: again.status().done >= 1, 30, "a task after a restart")
    finally:
        again.close()
    assert admin(server, "GET", "/v1/admin/stats").json()["devices"] == devices


@pytest.mark.parametrize(
    ("url", "key", "says"),
    [
        ("http://127.0.0.1:{free}", ENROLL, "Cannot reach the coordinator"),
        ("{url}/not-fleet", ENROLL, "does not answer like a Fleet coordinator"),
        ("{url}", "wrong-key", "enrollment key was refused"),
        ("ftp://{host}", ENROLL, "is not an http(s) URL"),
    ],
)
def test_a_bad_coordinator_or_key_is_explained_and_retried(coordinator, tmp_path, url, key, says) -> None:
    server, shard = coordinator
    target = url.format(free=free_port(), url=server.url, host="127.0.0.1")
    control = AppController(tmp_path / "app", backoff_max=1.0)
    control.update_settings(AppSettings(server_url=target, enrollment_key=key, data_path=str(shard)))
    try:
        control.start()
        until(lambda: says in control.status().message, 20, says)
        seen = control.status()
        assert seen.state == "error" and seen.done == 0
        if "http(s)" not in says:
            assert seen.retry_at is not None  # the worker backs off, the app says when it tries again
    finally:
        control.close()
    assert load_settings(tmp_path / "app").server_url == target.rstrip("/")


def test_a_refused_token_enrolls_again(coordinator, tmp_path: Path) -> None:
    """A revoked device's token and an unknown one get the same 401: the app enrolls anew with its key."""
    server, shard = coordinator
    settings = AppSettings(server_url=server.url, enrollment_key=ENROLL, data_path=str(shard))
    settings = replace(settings, device_id="d-gone", device_token="revoked-token", token_server=server.url)
    save_settings(tmp_path / "app", settings)
    control = AppController(tmp_path / "app", backoff_max=1.0)
    try:
        control.start()
        until(lambda: control.status().done >= 1, 30, "a task with a new token")
    finally:
        control.close()
    assert load_settings(tmp_path / "app").device_token not in ("", "revoked-token")


def test_a_lost_token_enrolls_again_as_the_same_install(coordinator, tmp_path: Path) -> None:
    """Issue 27: the install secret and the privacy ledger live in the app's folder (Android: its storage),
    so enrolling again (a lost or refused token) returns the same device id: the server's ledger goes on."""
    server, shard = coordinator

    def one_task(control: AppController) -> str:
        try:
            control.start()
            until(lambda: control.status().done >= 1, 30, "a task")
        finally:
            control.close()
        return load_settings(tmp_path / "app").device_id

    first = one_task(app(tmp_path, server.url, shard))
    save_settings(tmp_path / "app", replace(load_settings(tmp_path / "app"), device_token="lost-token"))
    assert first and one_task(AppController(tmp_path / "app", backoff_max=1.0)) == first
    state = tmp_path / "app" / STATE_DIR
    assert (state / INSTALL_FILE).exists() and (state / LEDGER_FILE).exists()


def test_operator_pause_is_a_503_the_app_waits_out(coordinator, tmp_path: Path) -> None:
    server, shard = coordinator
    control = app(tmp_path, server.url, shard)
    try:
        control.start()
        until(lambda: control.status().done >= 1, 30, "a first task")
        assert admin(server, "POST", "/v1/admin/training/pause").status_code == 204
        until(lambda: control.status().state == "waiting", 20, "waiting")
        assert "paused by the coordinator" in control.status().message and control.status().retry_at
    finally:
        admin(server, "POST", "/v1/admin/training/resume")
    try:
        done = control.status().done
        until(lambda: control.status().done > done, 30, "tasks after the resume")
    finally:
        control.close()


def test_the_app_pauses_by_itself_on_low_battery_or_a_metered_network(coordinator, tmp_path: Path) -> None:
    server, shard = coordinator
    bridge = StandInBridge(json.loads((Path(__file__).parent / "fixtures/android_phone.json").read_text())[
        "devices"]["galaxy_a52_charging_metered"])  # fmt: skip
    control = app(tmp_path, server.url, shard, platform=backends(android=True, bridge=bridge))
    try:
        control.start()
        until(lambda: "unmetered network" in control.status().message, 20, "metered hold")
        assert control.status().state == "paused" and control.status().done == 0
        control.update_settings(replace(control.settings, unmetered_only=False, min_battery_percent=90))
        time.sleep(1.0)  # 41 % < 90 %, but charging: allowed; tasks run on the Android backends
        until(lambda: control.status().done >= 2, 30, "tasks through the Android stand-ins")
    finally:
        control.close()


def test_two_drawings_train_once_then_rest_until_a_new_drawing(coordinator, tmp_path: Path) -> None:
    """The operator's phone (issue 29): 2 drawings, grants up to 32. A task computes the 2, then the app
    rests instead of recomputing them back to back; a new drawing ends the rest at once."""
    server, _ = coordinator
    control = app(tmp_path, server.url, None, rest_seconds=600.0)
    try:
        assert control.status().state == "stopped"
        control.start()
        until(lambda: control.status().state == "setup", 10, "the first run")  # no drawings: not an error
        assert "draw a digit in Try the model" in control.status().message
        for label in (7, 1):
            control.add_drawing(strokes_to_image([[(0, 0), (9, 9)]]), label)
        resting = ("resting", True)  # after a task on both (one on the first alone would rest too)
        until(lambda: (control.status().state, "all 2 " in control.status().message) == resting, 30, "a rest")
        status = control.status()
        assert status.retry_at is not None and status.retry_at > time.time() + 500
        time.sleep(2.0)  # resting: no task on the same 2 examples
        assert control.status().done == status.done and [r.batch_size for r in status.tasks][-1] == 2
        control.add_drawing(strokes_to_image([[(0, 9), (9, 0)]]), 4)  # new data: train on it now
        until(lambda: control.status().done > status.done, 30, "a task on the new drawing")
        assert control.status().tasks[-1].batch_size == 3
    finally:
        control.close()


def test_a_model_the_phone_cannot_load_is_explained_then_retried(coordinator, tmp_path: Path) -> None:
    server, shard = coordinator
    bridge = StandInBridge(ort_error="Error code - ORT_NOT_IMPLEMENTED - Could not find an implementation")
    control = app(tmp_path, server.url, shard, platform=backends(android=True, bridge=bridge))
    try:
        control.start()
        until(lambda: "cannot load model" in control.status().message, 20, "load failure")
        assert control.status().state == "error" and control.status().retry_at is not None
        bridge.ort_error = None  # e.g. the operator promoted a model this phone supports
        until(lambda: control.status().done >= 1, 30, "a task once the model loads")
        assert control.classify(strokes_to_image([[(0, 0), (0, 9)]]), lambda g, p: None).result(20) is None
        assert control.model.version >= 0 and control.model.problem == ""
    finally:
        control.close()


def test_try_the_model_refreshes_and_survives_a_corrupt_cache(coordinator, tmp_path: Path) -> None:
    server, shard = coordinator
    control = app(tmp_path, server.url, shard)
    image = strokes_to_image([[(0, 10), (10, 10), (4, 0)]])
    try:
        assert control.refresh_model(force=True)
        first = control.model.version
        model_id = control.model.model_id
        served = httpx.get(f"{server.url}/v1/models/{model_id}/inference.onnx?version={first}").content
        want = InferenceSession(served).logits(image.reshape(1, 1, 28, 28))[0]
        guess = control.model.classify(image)
        assert guess is not None and len(guess.top) == 3 and guess.top[0][0] == int(np.argmax(want))
        control.start()
        until(lambda: control.status().done >= 2, 30, "new versions")
    finally:
        control.close()  # nothing trains from here on: the version stays put
    assert control.refresh_model(force=True) and control.model.version > first  # a newer one exists
    cached = next((tmp_path / "app" / "models").glob("*.onnx"))
    cached.write_bytes(b"truncated")  # a download cut short, a full disk: the phone cannot load it
    fresh = AppController(tmp_path / "app")
    assert not fresh.refresh_model(force=True)  # explained, and the bad file dropped
    assert "cannot load model" in fresh.model.problem and not cached.exists()
    assert fresh.refresh_model(force=True) and fresh.model.classify(image) is not None


class DroppingProxy:
    """A TCP proxy that forwards the first gradient push, then cuts the connection before its answer."""

    def __init__(self, port: int) -> None:
        self.target, self.listener = port, socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.target))
        pushing = threading.Event()

        def up() -> None:
            while data := _recv(client):
                if b"/result HTTP/1.1" in data and not self.dropped:
                    pushing.set()
                upstream.sendall(data)
            upstream.close()

        threading.Thread(target=up, daemon=True).start()
        while data := _recv(upstream):
            if pushing.is_set():
                self.dropped += 1  # the coordinator applied the gradient; its answer never arrives
                break
            client.sendall(data)
        client.close()
        upstream.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def test_a_push_cut_mid_answer_is_resent_and_counted_once(coordinator, tmp_path: Path) -> None:
    server, shard = coordinator
    proxy = DroppingProxy(server.port)
    control = app(tmp_path, proxy.url, shard)
    try:
        control.start()
        until(lambda: control.status().done >= 2, 40, "tasks through the proxy")
    finally:
        control.close()
    assert proxy.dropped == 1
    rows = control.status().tasks
    assert rows[0].duplicate and not any(r.duplicate for r in rows[1:])  # the resend got the stored answer
    records = admin(server, "GET", "/v1/admin/records?limit=10000").json()
    ids = [r["task_id"] for r in records if "task_id" in r]
    assert len(ids) == len(set(ids))  # no task counted twice


def test_a_rate_limit_429_and_the_end_of_training_410_are_shown(tmp_path: Path) -> None:
    shards, _ = write_shards(tmp_path / "data", devices=1, partition="iid", seed=5)
    limits = {"rate_limit_per_second": 0.5, "rate_limit_burst": 2, "max_versions": 3}
    with ServerProcess(tmp_path / "server", max_batch=32, time_slo_ms=300, **limits) as server:
        control = app(tmp_path, server.url, shards[0])
        try:
            control.start()
            until(lambda: "Asking too often" in control.status().message, 30, "a 429")
            assert control.status().state == "waiting" and control.status().retry_at is not None
            until(lambda: control.status().state == "finished", 60, "the 410 after max_versions")
            assert control.status().done >= 1
        finally:
            control.close()
