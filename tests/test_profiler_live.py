"""The live device's pieces that need no server: real psutil features, emulated thermal state and energy."""

from __future__ import annotations

import os

import psutil
import pytest

from sim.devices import load_catalog
from tests.support.live_device import EmulatedBattery, LiveFeatures, Thermal


@pytest.fixture
def spec():
    return next(s for s in load_catalog() if s.name == "Galaxy S8")


def test_features_mix_real_memory_and_frequency_with_emulated_temperature(spec) -> None:
    thermal = Thermal(spec, ambient_c=30.0)
    features = LiveFeatures(spec, thermal).read()
    assert features["total_memory"] == psutil.virtual_memory().total  # real
    assert 0 < features["available_memory"] <= features["total_memory"]  # real
    freqs = psutil.cpu_freq(percpu=True) or []
    if freqs:  # real: current frequency over this process's cores, which may change between reads
        cores = [c for c in os.sched_getaffinity(0) if c < len(freqs)]
        if all(freqs[c].max > 0 for c in cores):  # a range is reported: the reading lies inside it
            assert 0 < features["cpu_freq_sum"] <= 1.05 * sum(freqs[c].max for c in cores)
        else:  # a VM reporting a fixed nominal frequency only
            assert features["cpu_freq_sum"] == pytest.approx(sum(freqs[c].current for c in cores), rel=0.2)
    assert features["temperature"] == pytest.approx(30.0, abs=0.1)  # emulated, idle
    assert features["energy_per_cpu_time"] == spec.energy_per_cpu_time


def test_thermal_heats_under_load_and_battery_charges_real_cpu_time(spec) -> None:
    thermal = Thermal(spec, ambient_c=30.0)
    thermal.busy(120.0)
    assert thermal.core_c > 45.0 and 30.0 < thermal.sensor_c < thermal.core_c
    battery = EmulatedBattery(spec, Thermal(spec, ambient_c=30.0), battery_health=1.0)
    one = battery.end(battery.begin(), cpu_seconds=1.0)
    two = battery.end(battery.begin(), cpu_seconds=2.0)
    assert one.source == "emulated" and one.value == pytest.approx(spec.energy_per_cpu_time, rel=0.01)
    assert two.value == pytest.approx(2 * one.value, rel=0.01)
