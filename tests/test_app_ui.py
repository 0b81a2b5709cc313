"""The Kivy app under Xvfb against a real coordinator: a person's session, driven by tests/app_driver.py.

Screenshots of the three screens go to $FLEET_SCREENSHOTS (docs/img when refreshing the README's
pictures) or nowhere. The driver also measures the UI's frame intervals and the RSS while the
worker trains; they are printed here (run with -s) for android-build/README.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from client._onnx_session import InferenceSession
from tests.processes import ENROLL, ServerProcess

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("xvfb-run") is None and os.environ.get("CI") != "true", reason="no Xvfb"),
    # find_spec, not importorskip: importing Kivy here would take over this process's logging
    pytest.mark.skipif(importlib.util.find_spec("kivy") is None, reason="the app extra is not installed"),
]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("app-ui")
    # k=1: a version a push (the app rests between tasks on its 3 drawings: fewer pushes than before)
    with ServerProcess(tmp / "server", max_batch=32, time_slo_ms=300, energy_slo=0.01, k=1) as server:
        env = {**os.environ, "KIVY_HOME": str(tmp / "kivy"), "KIVY_NO_CONSOLELOG": "1"}
        command = [
            "xvfb-run", "-a", "-s", "-screen 0 800x900x24", sys.executable, str(ROOT / "tests/app_driver.py"),
            "--server", server.url, "--key", ENROLL, "--folder", str(tmp / "app"),
            "--out", str(tmp / "out.json"), "--screenshots", os.environ.get("FLEET_SCREENSHOTS", ""),
        ]  # fmt: skip
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=150, cwd=ROOT)
        out = json.loads((tmp / "out.json").read_text()) if (tmp / "out.json").exists() else {}
        assert run.returncode == 0 and "error" not in out, (out.get("error"), run.stderr[-3000:])
        out["logs"] = run.stdout + run.stderr + "".join(p.read_text() for p in (tmp / "kivy").rglob("*.txt"))
        out["served"] = {
            g["version"]: httpx.get(f"{server.url}/v1/models/{g['model_id']}/inference.onnx",
                                    params={"version": g["version"]}, timeout=30).content
            for g in out["guesses"]
        }  # fmt: skip
        out["stats"] = server.admin("/v1/admin/stats").json()
        out["settings"] = json.loads((tmp / "app" / "settings.json").read_text())
    return out


def test_settings_come_first_and_are_saved(session: dict) -> None:
    assert session["first_screen"] == "settings"  # no coordinator yet
    assert session["settings_note"] == "Saved."


def test_the_first_run_says_what_to_do_calmly_not_a_red_problem(session: dict) -> None:
    first = session["first_run"]  # coordinator and key set, no drawings yet: the normal first run
    assert first["state"] == "setup" and first["label"] == "Getting started"
    assert "draw a digit in Try the model" in first["message"]  # a phone trains only on what its user drew
    assert first["color"] != [0.72, 0.15, 0.12, 1] and first["label"] != "Problem"


def test_try_the_model_classifies_a_drawn_digit_with_the_served_model(session: dict) -> None:
    for guess in session["guesses"]:
        shown = [(int(d), int(p)) for d, p in re.findall(r"\[b\](\d)\[/b\] (\d+)%", guess["text"])]
        assert len(shown) == 3
        image = np.asarray(guess["image"], np.float32)
        assert image.shape == (28, 28) and image.max() == 1.0
        logits = InferenceSession(session["served"][guess["version"]]).logits(image.reshape(1, 1, 28, 28))[0]
        probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        want = [(int(c), round(100 * float(probs[c]))) for c in np.argsort(-probs)[:3]]
        assert [c for c, _ in shown] == [c for c, _ in want]
        assert all(abs(p - q) <= 1 for (_, p), (_, q) in zip(shown, want, strict=True))


def test_labelled_drawings_become_the_training_data(session: dict) -> None:
    assert session["drawings"] == 3 and session["drawing_labels"] == [7, 1, 7]
    rows = [line for line in session["status_rows"].splitlines() if line.startswith("v")]
    assert len(rows) >= 3  # the status screen lists the tasks the drawings trained
    assert session["stats"]["version"] >= 3 and session["stats"]["devices"] == 1
    assert session["status_state"] in ("Training", "Connected", "Resting")  # between tasks: a short rest


def test_a_task_uses_at_most_the_drawings_and_then_rests(session: dict) -> None:
    resting = session["resting"]  # 3 drawings, grants up to 32: every task computed at most 3 examples
    assert resting["label"] == "Resting" and "used all 3 local examples" in resting["message"]
    assert resting["rows"] and max(resting["rows"]) <= 3


def test_the_energy_chart_has_its_slo_line_and_a_scale(session: dict) -> None:
    energy = session["chart"]["energy"]
    assert energy["slo"] == 0.01 and energy["ticks"][0] == "0 %" and energy["ticks"][-1].endswith(" %")
    assert session["chart"]["time"]["ticks"][-1].endswith(" ms")
    across = [energy["left"], energy["slo_y"], energy["right"], energy["slo_y"]]
    slo_lines = [  # the dashed horizontal line across the energy panel at the SLO's height
        p for p in session["chart_lines"]
        if len(p) == 4 and all(abs(a - b) < 0.01 for a, b in zip(p, across, strict=True))
    ]  # fmt: skip
    assert len(slo_lines) == 1


def test_pause_stops_new_tasks_and_resume_restarts_them(session: dict) -> None:
    paused = session["paused"]
    assert paused["label"] == "Paused" and paused["button"] == "Resume" and paused["saved"]
    assert paused["done_after_2s"] == paused["done_at_pause"]
    assert session["resumed"] > paused["done_at_pause"]


def test_the_worker_runs_only_in_the_foreground(session: dict) -> None:
    background = session["background"]  # on_pause, then on_resume (which the driver waits for)
    assert background["state"] == "stopped" and background["after"] == background["done"]


def test_the_token_is_stored_never_logged(session: dict) -> None:
    token = session["settings"]["device_token"]
    assert token and session["token_saved"]
    assert token not in session["logs"] and ENROLL not in session["logs"]


def test_the_ui_keeps_drawing_frames_while_the_worker_trains(session: dict) -> None:
    measure, rss, peak = session["measure"], session["rss"], session["rss_peak"]
    print(
        f"\napp under Xvfb, 3 s of training ({measure['tasks']} tasks): {measure['frames']} frames, "
        f"interval mean {measure['mean_ms']:.1f} ms, p95 {measure['p95_ms']:.1f} ms, "
        f"max {measure['max_ms']:.1f} ms; "
        f"RSS {rss / 2**20:.0f} MiB (peak {peak / 2**20:.0f} MiB)"
    )
    assert measure["tasks"] >= 1 and measure["frames"] >= 30
    assert measure["max_ms"] < 500  # no freeze: the worker runs off the UI thread


def test_fleet_app_seeds_its_settings_and_opens_the_window(tmp_path: Path) -> None:
    env = {**os.environ, "KIVY_HOME": str(tmp_path / "kivy")}
    command = [
        "timeout", "8", "xvfb-run", "-a", sys.executable, "-m", "fleet.cli", "app",
        "--folder", str(tmp_path / "app"), "--server", "http://127.0.0.1:9", "--enrollment-key", "k-123",
    ]  # fmt: skip
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
    saved = json.loads((tmp_path / "app" / "settings.json").read_text())
    assert saved["server_url"] == "http://127.0.0.1:9" and saved["enrollment_key"] == "k-123"
    logs = run.stderr + "".join(p.read_text() for p in (tmp_path / "kivy").rglob("*.txt"))
    assert "Start application main loop" in logs
    assert str(ROOT / "client") not in logs  # no traceback through the app's code
    assert "k-123" not in logs
