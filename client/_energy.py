"""Energy per task in % of battery: read from the battery gauge where there is one, else modelled.

The model (also what the simulator uses) charges a fixed active power for the CPU time of the task:

    energy (% battery) = active_power_w * cpu_seconds / (battery_wh * 3600) * 100

with phone defaults ``active_power_w = 2.5`` W and ``battery_wh = 11.55`` Wh (3000 mAh at 3.85 V),
i.e. about 0.0060 % of the battery per CPU second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = [
    "DEFAULT_ACTIVE_POWER_W",
    "DEFAULT_BATTERY_WH",
    "BatteryMeter",
    "BatteryState",
    "EnergyMeter",
    "EnergyModel",
    "EnergyReading",
    "default_energy_meter",
    "psutil_battery",
    "sysfs_battery",
]

logger = logging.getLogger("fleet.client")

DEFAULT_ACTIVE_POWER_W = 2.5
DEFAULT_BATTERY_WH = 3.0 * 3.85  # 3000 mAh at 3.85 V = 11.55 Wh
SYSFS_POWER_SUPPLY = Path("/sys/class/power_supply")


@dataclass(frozen=True)
class EnergyReading:
    """The energy of one task (% battery, None if unknown) and which source produced it."""

    value: float | None
    source: str


@dataclass(frozen=True)
class BatteryState:
    """A gauge reading: charge left in percent and whether the battery is draining."""

    percent: float
    discharging: bool


@runtime_checkable
class EnergyMeter(Protocol):
    """Measures one task: ``begin()`` before computing, ``end(mark, cpu_seconds)`` after."""

    def begin(self) -> object: ...

    def end(self, mark: object, cpu_seconds: float) -> EnergyReading: ...

    def energy_per_cpu_time(self) -> float | None: ...


@dataclass(frozen=True)
class EnergyModel:
    """A fixed active power drawn for the task's CPU time, as a share of a phone battery."""

    active_power_w: float = DEFAULT_ACTIVE_POWER_W
    battery_wh: float = DEFAULT_BATTERY_WH

    def energy(self, cpu_seconds: float) -> float:
        """% battery spent by ``cpu_seconds`` of active CPU."""
        return self.active_power_w * max(0.0, cpu_seconds) / (self.battery_wh * 3600.0) * 100.0

    def energy_per_cpu_time(self) -> float:
        """% battery per CPU second."""
        return self.energy(1.0)

    def begin(self) -> object:
        return None

    def end(self, mark: object, cpu_seconds: float) -> EnergyReading:
        return EnergyReading(self.energy(cpu_seconds), "model")


class BatteryMeter:
    """The gauge's percent drop over a task; the model stands in when the gauge cannot tell.

    A gauge cannot tell while charging, or when its counter did not move during a short task
    (fuel gauges update every few seconds); the reading then says ``source="model"``.
    """

    def __init__(
        self,
        read: Callable[[], BatteryState | None],
        *,
        name: str = "battery",
        fallback: EnergyModel | None = None,
    ) -> None:
        self.read = read
        self.name = name
        self.fallback = fallback if fallback is not None else EnergyModel()
        self._per_cpu_second: float | None = None

    def __repr__(self) -> str:
        return f"BatteryMeter(name={self.name!r})"

    def begin(self) -> object:
        return self.read()

    def end(self, mark: object, cpu_seconds: float) -> EnergyReading:
        after = self.read()
        if isinstance(mark, BatteryState) and after is not None and mark.discharging and after.discharging:
            drop = mark.percent - after.percent
            if drop > 0.0:
                if cpu_seconds > 0.0:
                    self._per_cpu_second = drop / cpu_seconds
                return EnergyReading(drop, self.name)
        return self.fallback.end(None, cpu_seconds)

    def energy_per_cpu_time(self) -> float | None:
        """% battery per CPU second from the last task the gauge measured (None before that)."""
        return self._per_cpu_second


def sysfs_battery(root: Path = SYSFS_POWER_SUPPLY) -> Callable[[], BatteryState | None]:
    """A reader of Linux batteries' ``energy_now``/``charge_now`` counters (µWh/µAh resolution)."""

    def read() -> BatteryState | None:
        now_total = full_total = 0.0
        discharging = False
        try:
            supplies = sorted(root.iterdir())
        except OSError:
            return None
        for supply in supplies:
            if _read_text(supply / "type") != "Battery":
                continue
            for kind in ("energy", "charge"):
                now = _read_float(supply / f"{kind}_now")
                full = _read_float(supply / f"{kind}_full")
                if now is not None and full:
                    now_total += now
                    full_total += full
                    discharging = discharging or _read_text(supply / "status") == "Discharging"
                    break
        if full_total <= 0.0:
            return None
        return BatteryState(100.0 * now_total / full_total, discharging)

    return read


def psutil_battery() -> BatteryState | None:
    """The battery as psutil sees it (any platform; percent may be coarse)."""
    import psutil

    try:
        battery = psutil.sensors_battery()
    except (AttributeError, NotImplementedError, OSError):
        return None
    if battery is None:
        return None
    return BatteryState(float(battery.percent), battery.power_plugged is not True)


def default_energy_meter(model: EnergyModel | None = None) -> EnergyMeter:
    """The best source on this machine: a Linux battery, else psutil's battery, else the model."""
    model = model if model is not None else EnergyModel()
    sysfs = sysfs_battery()
    if sysfs() is not None:
        return BatteryMeter(sysfs, name="battery:sysfs", fallback=model)
    if psutil_battery() is not None:
        return BatteryMeter(psutil_battery, name="battery:psutil", fallback=model)
    logger.debug("no battery found; energy comes from the model %s", model)
    return model


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_float(path: Path) -> float | None:
    text = _read_text(path)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
