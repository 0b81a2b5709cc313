"""Device features for the profiler (I-Prof), read from psutil behind a small interface.

Keys (see docs/protocol.md): ``available_memory`` and ``total_memory`` in bytes, ``temperature`` in
°C, ``cpu_freq_sum`` (sum over cores of the maximum frequency, MHz), ``energy_per_cpu_time``
(% battery per CPU second). A value is ``None`` where the device cannot read it. The Android source
(pyjnius) implements the same ``FeatureSource`` protocol.
"""

from __future__ import annotations

import glob
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "FEATURE_KEYS",
    "ConditionSource",
    "Conditions",
    "FeatureSource",
    "PsutilConditions",
    "PsutilFeatures",
    "StaticFeatures",
    "cpu_freq_sum",
    "temperature",
]

logger = logging.getLogger("fleet.client")

FEATURE_KEYS = ("available_memory", "total_memory", "temperature", "cpu_freq_sum", "energy_per_cpu_time")
_PREFERRED_SENSORS = (
    "coretemp",
    "k10temp",
    "zenpower",
    "cpu_thermal",
    "cpu-thermal",
    "soc_thermal",
    "acpitz",
)
_SYSFS_MAX_FREQ = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq"


@runtime_checkable
class FeatureSource(Protocol):
    """Anything that reads the device's current features."""

    def read(self) -> dict[str, float | None]: ...


@dataclass(frozen=True)
class Conditions:
    """What an app's participation rules look at; None where the platform does not say."""

    battery_percent: float | None = None
    charging: bool | None = None
    metered: bool | None = None


@runtime_checkable
class ConditionSource(Protocol):
    """Anything that reads the device's battery and network conditions now."""

    def read(self) -> Conditions: ...


class PsutilConditions:
    """A desktop's battery from psutil (none on most servers); desktops do not say if a network is metered."""

    def __repr__(self) -> str:
        return "PsutilConditions()"

    def read(self) -> Conditions:
        import psutil

        try:
            battery = psutil.sensors_battery()
        except (AttributeError, NotImplementedError, OSError):
            battery = None
        if battery is None:
            return Conditions()
        return Conditions(float(battery.percent), battery.power_plugged is True, None)


class PsutilFeatures:
    """Features of this machine from psutil; ``energy_per_cpu_time`` comes from the energy meter."""

    def __init__(self, energy_per_cpu_time: Callable[[], float | None] | None = None) -> None:
        self.energy_per_cpu_time = energy_per_cpu_time

    def __repr__(self) -> str:
        return "PsutilFeatures()"

    def read(self) -> dict[str, float | None]:
        import psutil

        memory = psutil.virtual_memory()
        return {
            "available_memory": float(memory.available),
            "total_memory": float(memory.total),
            "temperature": temperature(),
            "cpu_freq_sum": cpu_freq_sum(),
            "energy_per_cpu_time": self.energy_per_cpu_time() if self.energy_per_cpu_time else None,
        }


class StaticFeatures:
    """Fixed features (tests, emulated devices); missing keys read as None."""

    def __init__(self, values: Mapping[str, float | None]) -> None:
        self.values = dict(values)

    def __repr__(self) -> str:
        return f"StaticFeatures({self.values!r})"

    def read(self) -> dict[str, float | None]:
        return {key: self.values.get(key) for key in FEATURE_KEYS}


def temperature() -> float | None:
    """The CPU temperature in °C (hottest sensor of the CPU's group), None where unreadable."""
    import psutil

    try:
        sensors = psutil.sensors_temperatures()
    except (AttributeError, NotImplementedError, OSError):
        return None
    if not sensors:
        return None
    group = next((sensors[name] for name in _PREFERRED_SENSORS if sensors.get(name)), None)
    if group is None:
        group = next(iter(sensors.values()))
    readings = [t.current for t in group if t.current is not None and -50.0 <= t.current <= 150.0]
    return float(max(readings)) if readings else None


def cpu_freq_sum() -> float | None:
    """Sum over cores of the maximum CPU frequency in MHz (psutil, else sysfs, else None)."""
    import psutil

    try:
        freqs = psutil.cpu_freq(percpu=True) or []
    except (AttributeError, NotImplementedError, OSError):
        freqs = []
    total = sum(f.max for f in freqs if f.max)
    if total > 0 and all(f.max for f in freqs):
        return float(total)
    khz = []
    for path in glob.glob(_SYSFS_MAX_FREQ):
        try:
            with open(path) as handle:
                khz.append(float(handle.read().strip()))
        except (OSError, ValueError):
            continue
    if khz:
        return sum(khz) / 1000.0
    return float(total) if total > 0 else None
