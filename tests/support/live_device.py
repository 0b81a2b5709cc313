"""One live device on this machine: a real worker process whose compute times are measured, not modelled.

Run as ``python -m tests.support.live_device ROLE CONFIG_JSON`` by the lab's
``experiments.profiler_live`` and tests/test_profiler_live.py:

* ``worker``: pins itself to its CPU set (``os.sched_setaffinity``), runs the real ``client.Worker``
  (onnxruntime with its thread count, batch sampled with replacement from its shard) against the
  coordinator's REST API until its deadline, and writes one JSON line per task.
* ``bootstrap``: the same device set-up without a server: grows the batch size until the measured
  time reaches 2x the SLO (I-Prof's offline bootstrap on the training configurations).
* ``load``: competing CPU load pinned to one core, its duty cycle varying sinusoidally over time.

Features: ``available_memory`` and ``total_memory`` are real (psutil), ``cpu_freq_sum`` is real
(psutil's current frequency summed over the cores this process may run on; this VM reports no max
frequency), ``temperature`` is emulated (the catalogue device's thermal model heated by the task's real
duration, cooled by the real idle time between tasks; this machine has no sensor) and
``energy_per_cpu_time`` is the catalogue device's nominal power profile. Energy per task is emulated:
the catalogue device's power (with its leakage and a unit's battery health) times the task's REAL CPU
seconds (``time.process_time`` over all onnxruntime threads).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from client import DeviceData, EnergyReading, GradientSession, Rejected, Worker, WorkerConfig, WorkerError
from sim.devices import DeviceSpec, load_catalog

__all__ = ["EmulatedBattery", "LiveFeatures", "Thermal"]

LEAKAGE_PER_C = 0.008  # as sim.cost


class Thermal:
    """The catalogue device's thermal model driven by real busy and idle wall time."""

    def __init__(self, spec: DeviceSpec, ambient_c: float = 30.0) -> None:
        self.spec = spec
        self.ambient_c = ambient_c
        self.core_c = ambient_c
        self.sensor_c = ambient_c
        self.last = time.monotonic()

    def busy(self, seconds: float) -> None:
        self.core_c += (self.spec.load_temp_c - self.core_c) * (1 - math.exp(-seconds / self.spec.heat_tau_s))
        self._sensor(seconds)
        self.last = time.monotonic()

    def reading(self) -> float:
        """Battery-sensor temperature now (cools over the idle time since the last task)."""
        now = time.monotonic()
        idle = max(0.0, now - self.last)
        self.core_c = self.ambient_c + (self.core_c - self.ambient_c) * math.exp(-idle / self.spec.cool_tau_s)
        self._sensor(idle)
        self.last = now
        return round(self.sensor_c, 1)

    def _sensor(self, seconds: float) -> None:
        target = self.ambient_c + 0.6 * (self.core_c - self.ambient_c)
        self.sensor_c += (target - self.sensor_c) * (1 - math.exp(-seconds / (4 * self.spec.heat_tau_s)))


class LiveFeatures:
    """Real memory and frequency from psutil; temperature and power profile emulated (module docstring)."""

    def __init__(self, spec: DeviceSpec, thermal: Thermal) -> None:
        self.spec = spec
        self.thermal = thermal

    def read(self) -> dict[str, float | None]:
        import psutil

        memory = psutil.virtual_memory()
        freqs = psutil.cpu_freq(percpu=True) or []
        cores = sorted(os.sched_getaffinity(0))
        freq_sum = sum(freqs[c].current for c in cores if c < len(freqs)) or None
        return {
            "available_memory": float(memory.available),
            "total_memory": float(memory.total),
            "temperature": self.thermal.reading(),
            "cpu_freq_sum": freq_sum,
            "energy_per_cpu_time": self.spec.energy_per_cpu_time,
        }


class EmulatedBattery:
    """``EnergyMeter`` charging the catalogue device's power for the task's real CPU seconds."""

    def __init__(self, spec: DeviceSpec, thermal: Thermal, battery_health: float) -> None:
        self.spec = spec
        self.thermal = thermal
        self.battery_health = battery_health

    def begin(self) -> object:
        return time.perf_counter()

    def end(self, mark: object, cpu_seconds: float) -> EnergyReading:
        self.thermal.busy(time.perf_counter() - float(mark))  # type: ignore[arg-type]
        power = self.spec.active_power_w * (1 + LEAKAGE_PER_C * max(0.0, self.thermal.core_c - 35.0))
        battery_j = self.spec.battery_mah * self.battery_health * 3.85 * 3.6
        return EnergyReading(power * cpu_seconds / battery_j * 100.0, "emulated")

    def energy_per_cpu_time(self) -> float | None:
        return self.spec.energy_per_cpu_time


def _spec(name: str) -> DeviceSpec:
    return next(s for s in load_catalog() if s.name == name)


def run_worker(cfg: dict[str, Any]) -> None:
    """Take tasks through the API until the deadline; one JSON line per task (and per rejection)."""
    os.sched_setaffinity(0, cfg["cores"])
    spec = _spec(cfg["catalog_device"])
    rng = np.random.default_rng(cfg["seed"])
    thermal = Thermal(spec, ambient_c=float(rng.normal(30.0, 2.0)))
    config = WorkerConfig(
        base_url=cfg["url"],
        enrollment_key=cfg["enrollment_key"],
        data=cfg["data"],
        device_model=cfg["device_model"],
        threads=cfg["threads"],
        seed=cfg["seed"],
        max_consecutive_errors=None,
    )
    energy = EmulatedBattery(spec, thermal, battery_health=float(rng.uniform(0.8, 1.0)))
    deadline = cfg["deadline"]
    with (
        Worker(config, features=LiveFeatures(spec, thermal), energy=energy) as worker,
        Path(cfg["out"]).open("w") as out,
    ):
        index = 0
        while time.time() < deadline:
            try:
                with _cores_held(cfg.get("core_locks") or []):
                    report = worker.run_one()
            except Rejected as exc:
                out.write(json.dumps({"rejected": exc.reason}) + "\n")
                time.sleep(min(exc.retry_after, 1.0))
                continue
            except WorkerError as exc:
                out.write(json.dumps({"error": str(exc)[:200], "index": index}) + "\n")
                index += 1  # the request may have been sized before it failed: keep the parity honest
                time.sleep(0.2)
                continue
            out.write(
                json.dumps(
                    {
                        "index": index,
                        "batch_size": report.batch_size,
                        "time_ms": report.compute_time_ms,
                        "predicted_time_ms": report.predicted_time_ms,
                        "energy": report.energy,
                        "temperature": thermal.sensor_c,
                        "loadavg": os.getloadavg()[0],
                        "at": time.time(),
                    }
                )
                + "\n"
            )
            out.flush()
            index += 1


@contextmanager
def _cores_held(paths: list[str]) -> Iterator[None]:
    """Hold this worker's cores for one task (flock, in sorted order): one phone per core at a time.

    Without it, workers on the same core slow each other down at random, which no fleet of separate
    phones does; the competing load (a phone's background apps) and the rest of the machine still run.
    """
    handles = [open(path, "a") for path in sorted(paths)]  # noqa: SIM115 - closed in finally
    try:
        for handle in handles:
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        for handle in handles:
            handle.close()  # releases the lock
        if handles:
            time.sleep(0.02)  # let a waiting worker take the core before this one asks again


def run_bootstrap(cfg: dict[str, Any]) -> None:
    """Grow the batch until the measured time reaches 2x the SLO; write bootstrap rows as JSON lines."""
    from models.manifest import builtin

    os.sched_setaffinity(0, cfg["cores"])
    spec = _spec(cfg["catalog_device"])
    rng = np.random.default_rng(cfg["seed"])
    thermal = Thermal(spec)
    features = LiveFeatures(spec, thermal)
    energy = EmulatedBattery(spec, thermal, battery_health=float(rng.uniform(0.8, 1.0)))
    bundle = builtin("mnist_cnn")
    session = GradientSession(bundle.manifest, bundle.train_onnx, cfg["threads"])
    data = DeviceData.from_npz(cfg["data"])
    batch = int(cfg.get("start_batch", 64))
    with Path(cfg["out"]).open("w") as out:
        while True:
            x, y = data.sample(batch, rng)
            row = features.read()
            mark = energy.begin()
            cpu0, t0 = time.process_time(), time.perf_counter()
            session.loss_and_gradient(bundle.init_params, x, y)
            time_ms = (time.perf_counter() - t0) * 1000.0
            reading = energy.end(mark, time.process_time() - cpu0)
            row.update(
                device_model=cfg["device_model"],
                batch_size=batch,
                time_ms=time_ms,
                energy=reading.value,
                time_slope_ms=time_ms / batch,
                energy_slope=(reading.value or 0.0) / batch,
            )
            out.write(json.dumps(row) + "\n")
            done_time = time_ms >= 2 * cfg["time_slo_ms"]
            done_energy = cfg.get("energy_slo") is None or (reading.value or 0) >= 2 * cfg["energy_slo"]
            if (done_time and done_energy) or batch >= cfg.get("max_batch", 20000):
                break
            batch = max(batch + 1, math.ceil(batch * cfg.get("growth", 1.25)))


def run_load(cfg: dict[str, Any]) -> None:
    """Busy-loop on one core with duty 0.5 ± 0.45·sin(2πt/period + phase), in 50 ms slices."""
    os.sched_setaffinity(0, [cfg["core"]])
    start = time.time()
    while time.time() < cfg["deadline"]:
        duty = 0.5 + 0.45 * math.sin(2 * math.pi * (time.time() - start) / cfg["period_s"] + cfg["phase"])
        busy_until = time.perf_counter() + 0.05 * duty
        while time.perf_counter() < busy_until:
            pass
        time.sleep(0.05 * (1 - duty))


if __name__ == "__main__":
    role, config_json = sys.argv[1], sys.argv[2]
    {"worker": run_worker, "bootstrap": run_bootstrap, "load": run_load}[role](json.loads(config_json))
