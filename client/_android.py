"""Android features, battery and network through pyjnius: the phone's side of ``_features``/``_energy``.

Importable anywhere: ``jnius`` is imported on first use, so desktop tests drive these classes with
stand-ins for the Java classes (``JavaBridge``). Units as Android reports them: ``MemoryInfo`` in
bytes, ``EXTRA_TEMPERATURE`` in tenths of °C, ``BATTERY_PROPERTY_CHARGE_COUNTER`` in µAh,
``BATTERY_PROPERTY_ENERGY_COUNTER`` in nWh, ``cpuinfo_max_freq`` in kHz.
"""

from __future__ import annotations

import glob
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ._energy import BatteryMeter, BatteryState, EnergyModel
from ._features import Conditions

__all__ = [
    "AndroidBattery",
    "AndroidConditions",
    "AndroidFeatures",
    "BatterySnapshot",
    "JavaBridge",
    "Pyjnius",
    "android_device_model",
    "android_energy_meter",
]

logger = logging.getLogger("fleet.client")

INT_MIN = -(2**31)  # Integer.MIN_VALUE: BatteryManager.getIntProperty's "not supported"
LONG_MIN = -(2**63)  # Long.MIN_VALUE: getLongProperty's "not supported"
SYSFS_MAX_FREQ = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/cpuinfo_max_freq"
T = TypeVar("T")


class JavaBridge(Protocol):
    """Java classes by name and the app's Android ``Context`` (pyjnius on a phone, stand-ins in tests)."""

    def autoclass(self, name: str) -> Any: ...

    def context(self) -> Any: ...


class Pyjnius:
    """The real bridge: pyjnius, imported on first use, and python-for-android's activity as the Context."""

    def __repr__(self) -> str:
        return "Pyjnius()"

    def autoclass(self, name: str) -> Any:
        from jnius import autoclass  # only on the phone (the p4a pyjnius recipe)

        return autoclass(name)

    def context(self) -> Any:
        return self.autoclass("org.kivy.android.PythonActivity").mActivity


def _safe(what: str, read: Callable[[], T]) -> T | None:
    """One Java read; an exception (a JavaException, a missing API on an old phone) reads as None."""
    try:
        return read()
    except Exception as exc:  # pyjnius raises JavaException; old APIs raise AttributeError
        logger.debug("android: %s unreadable: %r", what, exc)
        return None


@dataclass(frozen=True)
class BatterySnapshot:
    """One look at the battery: level (%), charging, temperature (°C) and the fine counters (None: absent)."""

    percent: float | None
    charging: bool | None
    temperature: float | None
    charge_uah: float | None
    energy_nwh: float | None


class AndroidBattery:
    """``BatteryManager`` properties plus the sticky ``ACTION_BATTERY_CHANGED`` intent.

    ``state()`` feeds ``BatteryMeter`` a level finer than the integer percent: the energy counter
    (nWh) or else the charge counter (µAh) over the full charge estimated at the first reading
    (counter × 100 / level), so a task's drop is measured in µAh, not in whole percent.
    """

    def __init__(self, bridge: JavaBridge | None = None) -> None:
        self.bridge = bridge if bridge is not None else Pyjnius()
        self._full: dict[str, float] = {}

    def __repr__(self) -> str:
        return "AndroidBattery()"

    def snapshot(self) -> BatterySnapshot:
        bridge = self.bridge
        context = bridge.context()
        manager_class = bridge.autoclass("android.os.BatteryManager")
        context_class = bridge.autoclass("android.content.Context")
        manager = context.getSystemService(context_class.BATTERY_SERVICE)
        intent = _safe("battery intent", lambda: self._sticky_intent(context))

        def prop_int(name: str) -> float | None:
            value = manager.getIntProperty(getattr(manager_class, name))
            return float(value) if value not in (INT_MIN, 0) else None

        def prop_long(name: str) -> float | None:
            value = manager.getLongProperty(getattr(manager_class, name))
            return float(value) if value not in (LONG_MIN, 0) else None

        percent = _safe("capacity", lambda: prop_int("BATTERY_PROPERTY_CAPACITY"))
        charging = _safe("charging", lambda: bool(manager.isCharging()))
        temperature = None
        if intent is not None:
            extra = manager_class.EXTRA_TEMPERATURE
            tenths = _safe("temperature", lambda: intent.getIntExtra(extra, INT_MIN))
            temperature = tenths / 10.0 if tenths is not None and tenths != INT_MIN else None
            if charging is None:
                plugged = _safe("plugged", lambda: intent.getIntExtra(manager_class.EXTRA_PLUGGED, -1))
                charging = None if plugged is None or plugged < 0 else plugged != 0
            if percent is None:
                percent = _safe("level", lambda: _level(intent, manager_class))
        return BatterySnapshot(
            percent=percent,
            charging=charging,
            temperature=temperature,
            charge_uah=_safe("charge counter", lambda: prop_int("BATTERY_PROPERTY_CHARGE_COUNTER")),
            energy_nwh=_safe("energy counter", lambda: prop_long("BATTERY_PROPERTY_ENERGY_COUNTER")),
        )

    def state(self) -> BatteryState | None:
        """The finest level the phone reports, for ``BatteryMeter`` (None: no battery reading)."""
        snap = _safe("battery", self.snapshot)
        if snap is None or snap.percent is None:
            return None
        discharging = snap.charging is False
        for kind, counter in (("energy", snap.energy_nwh), ("charge", snap.charge_uah)):
            if counter is None or counter <= 0:
                continue
            full = self._full.setdefault(kind, counter * 100.0 / max(snap.percent, 1.0))
            return BatteryState(100.0 * counter / full, discharging)
        return BatteryState(snap.percent, discharging)

    def _sticky_intent(self, context: Any) -> Any:
        intent_class = self.bridge.autoclass("android.content.Intent")
        filter_class = self.bridge.autoclass("android.content.IntentFilter")
        return context.registerReceiver(None, filter_class(intent_class.ACTION_BATTERY_CHANGED))


def _level(intent: Any, manager_class: Any) -> float | None:
    level = intent.getIntExtra(manager_class.EXTRA_LEVEL, -1)
    scale = intent.getIntExtra(manager_class.EXTRA_SCALE, -1)
    return 100.0 * level / scale if level >= 0 and scale > 0 else None


def android_energy_meter(battery: AndroidBattery, model: EnergyModel | None = None) -> BatteryMeter:
    """The battery gauge through ``BatteryManager``; the energy model while charging or too coarse."""
    return BatteryMeter(battery.state, name="battery:android", fallback=model or EnergyModel())


class AndroidFeatures:
    """I-Prof features on a phone: ``ActivityManager.MemoryInfo``, battery temperature, sysfs max freqs."""

    def __init__(
        self,
        bridge: JavaBridge | None = None,
        *,
        battery: AndroidBattery | None = None,
        energy_per_cpu_time: Callable[[], float | None] | None = None,
        max_freq_glob: str = SYSFS_MAX_FREQ,
    ) -> None:
        self.bridge = bridge if bridge is not None else Pyjnius()
        self.battery = battery if battery is not None else AndroidBattery(self.bridge)
        self.energy_per_cpu_time = energy_per_cpu_time
        self.max_freq_glob = max_freq_glob

    def __repr__(self) -> str:
        return "AndroidFeatures()"

    def read(self) -> dict[str, float | None]:
        memory = _safe("memory", self._memory) or (None, None)
        battery = _safe("battery", self.battery.snapshot)
        return {
            "available_memory": memory[0],
            "total_memory": memory[1],
            "temperature": battery.temperature if battery is not None else None,
            "cpu_freq_sum": sysfs_cpu_freq_sum(self.max_freq_glob),
            "energy_per_cpu_time": self.energy_per_cpu_time() if self.energy_per_cpu_time else None,
        }

    def _memory(self) -> tuple[float, float]:
        context_class = self.bridge.autoclass("android.content.Context")
        manager = self.bridge.context().getSystemService(context_class.ACTIVITY_SERVICE)
        info = self.bridge.autoclass("android.app.ActivityManager$MemoryInfo")()
        manager.getMemoryInfo(info)
        return float(info.availMem), float(info.totalMem)


def sysfs_cpu_freq_sum(pattern: str = SYSFS_MAX_FREQ) -> float | None:
    """Sum over cores of ``cpuinfo_max_freq`` (kHz in sysfs) in MHz; None where the files are unreadable."""
    khz = []
    for path in sorted(glob.glob(pattern)):
        try:
            with open(path) as handle:
                khz.append(float(handle.read().strip()))
        except (OSError, ValueError):
            continue
    return sum(khz) / 1000.0 if khz else None


class AndroidConditions:
    """What the app's participation rules read: battery level, charging, a metered network."""

    def __init__(self, bridge: JavaBridge | None = None, *, battery: AndroidBattery | None = None) -> None:
        self.bridge = bridge if bridge is not None else Pyjnius()
        self.battery = battery if battery is not None else AndroidBattery(self.bridge)

    def __repr__(self) -> str:
        return "AndroidConditions()"

    def read(self) -> Conditions:
        battery = _safe("battery", self.battery.snapshot)
        return Conditions(
            battery_percent=battery.percent if battery is not None else None,
            charging=battery.charging if battery is not None else None,
            metered=_safe("metered", self._metered),
        )

    def _metered(self) -> bool | None:
        context_class = self.bridge.autoclass("android.content.Context")
        manager = self.bridge.context().getSystemService(context_class.CONNECTIVITY_SERVICE)
        if manager.getActiveNetwork() is None:
            return None  # offline: the platform says nothing about a network that is not there
        return bool(manager.isActiveNetworkMetered())


def android_device_model(bridge: JavaBridge | None = None) -> str:
    """``Build.MANUFACTURER Build.MODEL``, e.g. "Google Pixel 6"."""
    build = (bridge if bridge is not None else Pyjnius()).autoclass("android.os.Build")
    maker, model = str(build.MANUFACTURER or "").strip(), str(build.MODEL or "").strip()
    if model.lower().startswith(maker.lower()):
        return model or "Android"
    return f"{maker.capitalize()} {model}".strip() or "Android"
