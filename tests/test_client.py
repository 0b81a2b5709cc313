"""The device worker (client/): its data, features, energy model and ONNX session (the transport:
test_client_transport.py; the worker's loop: test_client_worker.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from client import (
    DeviceData,
    GradientSession,
)
from client._energy import BatteryMeter, EnergyModel, sysfs_battery
from client._features import FEATURE_KEYS, PsutilFeatures
from models.manifest import BUILTIN_DIR
from tests.support.client_doubles import make_data, numpy_reference

# --- data, features, energy ----------------------------------------------------------------------


def test_device_data_scales_uint8_and_counts_labels():
    data = DeviceData(np.full((4, 1, 28, 28), 255, np.uint8), np.array([0, 3, 3, 9]))
    assert data.x.dtype == np.float32 and data.x.max() == 1.0 and data.y.dtype == np.int64
    assert data.label_counts(10) == [1, 0, 0, 2, 0, 0, 0, 0, 0, 1]
    with pytest.raises(ValueError):
        data.label_counts(5)


def test_device_data_samples_with_replacement_beyond_its_size():
    data = DeviceData(np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32), np.array([1, 2, 2]))
    x, y = data.sample(50, np.random.default_rng(0))
    assert x.shape == (50, 1, 28, 28) and y.shape == (50,) and set(y) <= {1, 2}
    again = data.sample(50, np.random.default_rng(0))
    assert np.array_equal(again[1], y)  # the generator, not global state, decides


def test_device_data_batches_without_replacement_and_never_beyond_its_size():
    data = DeviceData(np.random.default_rng(0).random((6, 1, 28, 28), dtype=np.float32), np.arange(6))
    x, y = data.batch(1000, np.random.default_rng(0))
    assert x.shape == (6, 1, 28, 28) and y.tolist() == list(range(6))  # all N, each once
    y[0] = 9
    assert data.y[0] == 0  # a copy: an attack flipping the batch's labels leaves the shard alone
    for seed in range(20):
        x, y = data.batch(4, np.random.default_rng(seed))
        assert len(y) == 4 == len(set(y.tolist()))  # no example twice
        np.testing.assert_array_equal(x, data.x[y])
    with pytest.raises(ValueError):
        data.batch(0, np.random.default_rng(0))


def test_device_data_validates_and_loads_npz(tmp_path):
    with pytest.raises(ValueError):
        DeviceData(np.full((2, 1, 28, 28), 3.0, np.float32), np.array([0, 1]))
    with pytest.raises(ValueError):
        DeviceData(np.zeros((2, 1, 28, 28), np.float32), np.array([0]))
    np.savez(tmp_path / "shard.npz", x=np.zeros((5, 1, 28, 28), np.uint8), y=np.arange(5))
    data = DeviceData.from_npz(tmp_path / "shard.npz")
    assert len(data) == 5 and data.label_counts(10)[:6] == [1, 1, 1, 1, 1, 0]


def test_psutil_features_have_the_protocol_keys():
    features = PsutilFeatures(energy_per_cpu_time=EnergyModel().energy_per_cpu_time).read()
    assert set(features) == set(FEATURE_KEYS)
    assert features["total_memory"] > features["available_memory"] > 0
    for key in ("temperature", "cpu_freq_sum"):
        assert features[key] is None or (isinstance(features[key], float) and features[key] > 0)
    assert features["energy_per_cpu_time"] == pytest.approx(2.5 / (11.55 * 3600) * 100)
    assert PsutilFeatures().read()["energy_per_cpu_time"] is None
    json.dumps(features)  # plain numbers and None only


def test_energy_model_numbers():
    model = EnergyModel()
    assert (model.active_power_w, model.battery_wh) == (2.5, pytest.approx(11.55))
    assert model.energy(1.0) == pytest.approx(0.0060125, rel=1e-4)
    assert model.energy(60.0) == pytest.approx(0.36075, rel=1e-4)  # a minute of CPU: 0.36 % battery
    assert EnergyModel(active_power_w=1.0, battery_wh=10.0).energy(36.0) == pytest.approx(0.1)
    assert model.end(model.begin(), 2.0).source == "model"


def test_battery_meter_reads_sysfs_drop_and_falls_back(tmp_path):
    battery = tmp_path / "BAT0"
    battery.mkdir()
    (tmp_path / "AC").mkdir()
    (tmp_path / "AC" / "type").write_text("Mains\n")
    for name, value in {"type": "Battery", "status": "Discharging", "energy_full": "40000000"}.items():
        (battery / name).write_text(value + "\n")
    (battery / "energy_now").write_text("20000000\n")
    meter = BatteryMeter(sysfs_battery(tmp_path), name="battery:sysfs")
    assert meter.energy_per_cpu_time() is None
    mark = meter.begin()
    (battery / "energy_now").write_text("19996000\n")
    reading = meter.end(mark, cpu_seconds=2.0)
    assert reading.source == "battery:sysfs" and reading.value == pytest.approx(0.01)
    assert meter.energy_per_cpu_time() == pytest.approx(0.005)
    mark = meter.begin()  # the gauge did not tick: the model answers
    assert meter.end(mark, 2.0) == meter.fallback.end(None, 2.0)
    (battery / "status").write_text("Charging\n")
    assert meter.end(meter.begin(), 1.0).source == "model"
    assert sysfs_battery(tmp_path / "missing")() is None


# --- the ONNX session ---------------------------------------------------------------------------


def test_gradient_session_matches_numpy(tiny):
    manifest, graph = tiny
    session = GradientSession(manifest, graph, threads=1)
    flat = np.random.default_rng(2).normal(0, 0.05, manifest.num_params).astype(np.float32)
    x, y = make_data(32).sample(32, np.random.default_rng(3))
    loss, gradient = session.loss_and_gradient(flat, x, y)
    ref_loss, ref_gradient = numpy_reference(flat, x, y, manifest.num_classes)
    assert gradient.dtype == np.float32 and gradient.shape == (manifest.num_params,)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    np.testing.assert_allclose(gradient, ref_gradient, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["mnist_cnn", "mlp"])
def test_gradient_session_on_builtin_bundles(name):
    if not (BUILTIN_DIR / name / "manifest.json").exists():
        pytest.skip(f"built-in bundle {name} not exported yet")
    from models.manifest import builtin

    bundle = builtin(name)
    session = GradientSession(bundle.manifest, bundle.train_onnx)
    x, y = make_data(8, bundle.manifest.num_classes).sample(8, np.random.default_rng(0))
    x = x.reshape((8, *bundle.manifest.input_shape))
    loss, gradient = session.loss_and_gradient(bundle.init_params, x, y)
    assert math.isfinite(loss) and gradient.shape == (bundle.manifest.num_params,)
    assert np.isfinite(gradient).all()
