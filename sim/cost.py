"""The hidden cost model of one physical phone: how long a task takes and how much battery it drains.

A ``DeviceUnit`` is one unit of a ``DeviceSpec`` with a state the profiler never sees directly:

* time per sample = ms_per_sample · unit factor · throttling(core temperature) / (1 − background load)
  · per-task noise, plus a fixed ``overhead_ms``; the task runs in chunks of at most 0.5 s so it heats
  the core while it runs (the "up" phase is slower than the start);
* core temperature heats towards ``load_temp_c`` under load (time constant ``heat_tau_s``) and cools
  towards the unit's ambient temperature when idle (``cool_tau_s``); throttling slows compute by
  ``throttle_per_c`` per °C above ``throttle_onset_c``;
* the reported temperature is the battery sensor: it follows the core with a 4x slower time constant
  and only 60% of the core's rise above ambient, read to 0.1 °C with sensor noise (so it shows the
  thermal state only partly);
* background load (other apps) follows an AR(1) process around the model's mean; it slows the task
  and lowers the available memory the phone reports;
* energy (% battery) = power · task CPU seconds / battery energy; power rises 0.8% per °C of core
  temperature above 35 °C (leakage), the unit's battery has lost 0–20% of its capacity and its power
  draw differs from the nominal one.

Noise levels (stated, fixed before tuning the profiler): per-task time noise lognormal with σ =
``noise_sd`` (4–6% by model), unit-to-unit speed σ = ``unit_sd`` (4–7%), unit power σ = 5%, battery
health uniform in [0.80, 1.00], per-task energy noise σ = 3%, ambient temperature N(30, 2) °C,
temperature sensor σ = 0.3 °C, available-memory noise σ = 3% of total memory, background load AR(1)
with ρ = 0.8 per request and innovation σ = 0.04, clipped to [0, 0.6].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.devices import DeviceSpec

__all__ = ["DeviceUnit", "TaskCost"]

CHUNK_S = 0.5
TIME_NOISE_UNIT_POWER_SD = 0.05
ENERGY_NOISE_SD = 0.03
SENSOR_SD_C = 0.3
MEMORY_SD = 0.03
BG_RHO, BG_SD, BG_MAX = 0.8, 0.04, 0.6
LEAKAGE_PER_C = 0.008
VOLTS = 3.85


@dataclass(frozen=True)
class TaskCost:
    """What one task cost: wall time (ms), energy (% battery), the task's own CPU seconds."""

    time_ms: float
    energy: float
    cpu_seconds: float


class DeviceUnit:
    """One phone of a given model, with its own hidden variation and thermal/background state."""

    def __init__(self, spec: DeviceSpec, rng: np.random.Generator) -> None:
        self.spec = spec
        self.rng = rng
        self.unit_factor = float(math.exp(rng.normal(0.0, spec.unit_sd)))
        self.power_factor = float(math.exp(rng.normal(0.0, TIME_NOISE_UNIT_POWER_SD)))
        self.battery_health = float(rng.uniform(0.80, 1.00))
        self.ambient_c = float(rng.normal(30.0, 2.0))
        self.core_c = self.ambient_c
        self.sensor_c = self.ambient_c
        self.background = float(np.clip(rng.normal(spec.background_load, 0.02), 0.0, BG_MAX))

    def __repr__(self) -> str:
        return f"DeviceUnit({self.spec.name!r}, core={self.core_c:.1f}C, bg={self.background:.2f})"

    # ------------------------------------------------------------------ what Android reports
    def features(self) -> dict[str, float | None]:
        """The features a stock Android phone reads at request time (missing ones are None)."""
        spec = self.spec
        total = None if spec.total_memory_mb is None else spec.total_memory_mb * 1024.0**2
        available = None
        if total is not None:
            free = 0.45 - 0.5 * self.background + self.rng.normal(0.0, MEMORY_SD)
            available = float(np.clip(free, 0.05, 0.9) * total)
        temperature = round(self.sensor_c + self.rng.normal(0.0, SENSOR_SD_C), 1)
        return {
            "available_memory": available,
            "total_memory": total,
            "temperature": float(temperature),
            "cpu_freq_sum": spec.cpu_freq_sum,
            "energy_per_cpu_time": spec.energy_per_cpu_time,
        }

    # ------------------------------------------------------------------ running and idling
    def run_task(self, batch_size: int) -> TaskCost:
        """Compute ``batch_size`` samples: advances the thermal state, returns time and energy."""
        spec = self.spec
        noise = math.exp(self.rng.normal(0.0, spec.noise_sd))
        base = spec.ms_per_sample * self.unit_factor * noise / (1.0 - self.background)
        remaining = float(batch_size)
        wall_ms = spec.overhead_ms
        joules = 0.0
        cpu_s = spec.overhead_ms / 1000.0
        battery_j = spec.battery_mah * self.battery_health * VOLTS * 3.6
        power = spec.active_power_w * self.power_factor
        self._heat(spec.overhead_ms / 1000.0)
        while remaining > 0:
            per_sample = base * self._throttle()
            n = min(remaining, max(1.0, CHUNK_S * 1000.0 / per_sample))
            chunk_ms = n * per_sample
            busy_s = chunk_ms / 1000.0 * (1.0 - self.background)
            joules += power * (1.0 + LEAKAGE_PER_C * max(0.0, self.core_c - 35.0)) * busy_s
            cpu_s += busy_s
            wall_ms += chunk_ms
            self._heat(chunk_ms / 1000.0)
            remaining -= n
        joules += power * spec.overhead_ms / 1000.0
        energy = joules / battery_j * 100.0 * math.exp(self.rng.normal(0.0, ENERGY_NOISE_SD))
        self._step_background()
        return TaskCost(time_ms=wall_ms, energy=energy, cpu_seconds=cpu_s)

    def idle(self, seconds: float) -> None:
        """Cool down between tasks (the battery sensor follows the core more slowly)."""
        if seconds <= 0:
            return
        decay = math.exp(-seconds / self.spec.cool_tau_s)
        self.core_c = self.ambient_c + (self.core_c - self.ambient_c) * decay
        self._follow_sensor(seconds)

    def true_slope_ms(self) -> float:
        """The current hidden ms per sample (no noise): for plots and checks only, never the profiler."""
        base = self.spec.ms_per_sample * self.unit_factor / (1.0 - self.background)
        return base * self._throttle()

    # ------------------------------------------------------------------ private
    def _throttle(self) -> float:
        return 1.0 + self.spec.throttle_per_c * max(0.0, self.core_c - self.spec.throttle_onset_c)

    def _heat(self, seconds: float) -> None:
        grow = 1.0 - math.exp(-seconds / self.spec.heat_tau_s)
        self.core_c += (self.spec.load_temp_c - self.core_c) * grow
        self._follow_sensor(seconds)

    def _follow_sensor(self, seconds: float) -> None:
        target = self.ambient_c + 0.6 * (self.core_c - self.ambient_c)
        follow = 1.0 - math.exp(-seconds / (4.0 * self.spec.heat_tau_s))
        self.sensor_c += (target - self.sensor_c) * follow

    def _step_background(self) -> None:
        mean = self.spec.background_load
        value = mean + BG_RHO * (self.background - mean) + self.rng.normal(0.0, BG_SD)
        self.background = float(np.clip(value, 0.0, BG_MAX))
