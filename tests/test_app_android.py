"""The Android backends (client/_android*.py) on a desktop: stand-ins for the Java classes replay recorded
phone readings, and the ai.onnxruntime stand-ins run the real models, so units and marshalling are checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from client._android import (
    AndroidBattery,
    AndroidConditions,
    AndroidFeatures,
    android_device_model,
    android_energy_meter,
)
from client._android_onnx import AndroidGradientSession, AndroidInferenceSession
from client._energy import EnergyModel
from client._onnx_session import GradientSession, InferenceSession
from client._platform import backends
from models.manifest import builtin
from server.core.inference_export import bake_weights
from tests.android_standins import StandInBridge, recorded


def sysfs(tmp_path: Path, device: dict) -> str:
    for i, khz in enumerate(device["cpuinfo_max_freq_khz"]):
        folder = tmp_path / f"cpu{i}" / "cpufreq"
        folder.mkdir(parents=True)
        (folder / "cpuinfo_max_freq").write_text(f"{khz}\n")
    return str(tmp_path / "cpu[0-9]*" / "cpufreq" / "cpuinfo_max_freq")


def test_features_are_read_in_the_units_the_profiler_wants(tmp_path: Path) -> None:
    device = recorded("pixel_6")
    features = AndroidFeatures(StandInBridge(device), max_freq_glob=sysfs(tmp_path, device)).read()
    assert features == {
        "available_memory": 3279122432.0,  # MemoryInfo.availMem: bytes, as the protocol wants
        "total_memory": 7723016192.0,
        "temperature": pytest.approx(31.2),  # EXTRA_TEMPERATURE 312 = tenths of °C
        "cpu_freq_sum": pytest.approx(4 * 1803.0 + 2 * 2253.0 + 2 * 2802.0),  # kHz in sysfs → MHz
        "energy_per_cpu_time": None,  # no task measured yet
    }


def test_a_java_exception_reads_as_unknown_never_as_a_crash(tmp_path: Path) -> None:
    bridge = StandInBridge(recorded("pixel_6"))
    bridge.broken.add("getMemoryInfo")
    features = AndroidFeatures(bridge, max_freq_glob=str(tmp_path / "none")).read()
    assert features["available_memory"] is None and features["total_memory"] is None
    assert features["cpu_freq_sum"] is None  # sysfs unreadable
    assert features["temperature"] == pytest.approx(31.2)


def test_the_charge_counter_measures_a_task_in_uah_not_whole_percent() -> None:
    bridge = StandInBridge(recorded("pixel_6"))
    meter = android_energy_meter(AndroidBattery(bridge))
    mark = meter.begin()
    bridge.reading = 1  # after the task: 1500 µAh less, the integer level still 78 %
    reading = meter.end(mark, cpu_seconds=2.0)
    full_uah = 3598000 * 100 / 78  # estimated at the first reading
    assert reading.source == "battery:android"
    assert reading.value == pytest.approx(1500 / full_uah * 100)  # ≈ 0.0325 % of the battery
    assert meter.energy_per_cpu_time() == pytest.approx(reading.value / 2.0)


def test_the_energy_counter_in_nwh_is_preferred_where_the_phone_has_one() -> None:
    bridge = StandInBridge(recorded("energy_counter_phone"))
    meter = android_energy_meter(AndroidBattery(bridge))
    mark = meter.begin()
    bridge.reading = 1  # the charge counter is unsupported (Integer.MIN_VALUE) in this reading
    reading = meter.end(mark, cpu_seconds=1.0)
    full_nwh = 9616896000 * 100 / 64
    assert reading.value == pytest.approx((9616896000 - 9611127000) / full_nwh * 100)


def test_while_charging_or_without_counters_the_model_or_the_level_stands_in() -> None:
    charging = StandInBridge(recorded("galaxy_a52_charging_metered"))
    meter = android_energy_meter(AndroidBattery(charging), EnergyModel())
    mark = meter.begin()
    charging.reading = 1
    assert meter.end(mark, 1.0).source == "model"

    old = StandInBridge(recorded("old_phone_no_counters"))
    battery = AndroidBattery(old)
    assert battery.state().percent == 53.0  # only the integer level
    meter = android_energy_meter(battery)
    mark = meter.begin()
    old.reading = 1
    assert meter.end(mark, 10.0).value == pytest.approx(1.0)


def test_conditions_say_battery_charging_and_metered_where_the_platform_does() -> None:
    pixel = AndroidConditions(StandInBridge(recorded("pixel_6"))).read()
    assert (pixel.battery_percent, pixel.charging, pixel.metered) == (78.0, False, False)
    galaxy = AndroidConditions(StandInBridge(recorded("galaxy_a52_charging_metered"))).read()
    assert (galaxy.battery_percent, galaxy.charging, galaxy.metered) == (41.0, True, True)
    offline = AndroidConditions(StandInBridge(recorded("energy_counter_phone"))).read()
    assert offline.metered is None  # no active network: the platform says nothing


def test_device_model_names() -> None:
    assert android_device_model(StandInBridge(recorded("pixel_6"))) == "Google Pixel 6"
    assert android_device_model(StandInBridge(recorded("galaxy_a52_charging_metered"))) == "Samsung SM-A525F"


@pytest.fixture(scope="module")
def mnist() -> tuple:
    bundle = builtin("mnist_cnn")
    return bundle.manifest, bundle.train_onnx, bundle.infer_onnx, bundle.init_params


def test_the_android_gradient_matches_onnxruntime_python(mnist: tuple) -> None:
    manifest, train, _, init = mnist
    rng = np.random.default_rng(0)
    x = rng.random((8, *manifest.input_shape), dtype=np.float32)
    y = rng.integers(0, manifest.num_classes, 8)
    bridge = StandInBridge()
    loss, grad = AndroidGradientSession(manifest, train, 2, bridge=bridge).loss_and_gradient(init, x, y)
    want_loss, want_grad = GradientSession(manifest, train).loss_and_gradient(init, x, y)
    assert loss == pytest.approx(want_loss, rel=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)
    assert grad.dtype == np.float32 and grad.shape == (manifest.num_params,)
    assert not bridge.open_tensors  # every OnnxTensor and Result closed


def test_android_inference_matches_onnxruntime_python(mnist: tuple) -> None:
    manifest, _, infer, init = mnist
    served = bake_weights(infer, manifest, init)
    x = np.random.default_rng(1).random((3, *manifest.input_shape), dtype=np.float32)
    logits = AndroidInferenceSession(served, bridge=StandInBridge()).logits(x)
    np.testing.assert_allclose(logits, InferenceSession(served).logits(x), rtol=1e-5, atol=1e-6)


def test_a_model_the_phone_cannot_load_raises_the_java_message(mnist: tuple) -> None:
    manifest, train, _, _ = mnist
    bridge = StandInBridge(ort_error="Error code - ORT_INVALID_GRAPH - message: opset 21 is not supported")
    with pytest.raises(Exception, match="ORT_INVALID_GRAPH"):
        AndroidGradientSession(manifest, train, bridge=bridge)


def test_backends_are_picked_at_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANDROID_ARGUMENT", raising=False)
    monkeypatch.delenv("ANDROID_PRIVATE", raising=False)
    assert backends().name == "desktop"
    monkeypatch.setenv("ANDROID_ARGUMENT", "/data/user/0/org.fleetfl.fleet/files/app")
    phone = backends(bridge=StandInBridge())
    assert phone.name == "android" and phone.device_model == "Google Pixel 6"
    assert isinstance(phone.features, AndroidFeatures)
    assert phone.conditions.read().battery_percent == 78.0
