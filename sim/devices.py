"""The device catalogue: phone models, what Android reports about them, and their hidden cost parameters.

One row of ``device_catalog.csv`` is one device model. Columns the profiler may see (through the
features a unit reports): ``total_memory_mb`` and ``cores_mhz`` (per-core max frequencies, big.LITTLE
clusters written ``4x2800+4x1770``), plus the nominal ``active_power_w`` and ``battery_mah`` that
Android's power profile exposes as energy per non-idle CPU time. Hidden from the profiler (only
``sim.cost`` reads them): compute speed ``ms_per_sample`` (cool device, no background load; 12x spread
over the test devices, Galaxy S6 / Galaxy S10 = 7x as in the thesis), the fixed task cost
``overhead_ms``, the thermal model (steady core temperature under load, throttling onset and
slow-down per °C above it, heating and cooling time constants), the mean ``background_load`` and the
noise levels ``unit_sd`` (unit-to-unit speed spread within a model) and ``noise_sd`` (per task).

FedScale's device-capacity trace (client id → ``computation`` ms per sample, ``communication`` kbps)
is an alternative source: each client becomes a device model with those two numbers and default
values for the rest, and no readable memory or frequency (the profiler sees missing features).
"""

from __future__ import annotations

import csv
import io
import json
import pickle
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

__all__ = ["CATALOG_PATH", "DeviceSpec", "load_catalog", "load_fedscale_trace", "split_roles"]

CATALOG_PATH = Path(__file__).with_name("device_catalog.csv")
Role = Literal["bootstrap", "test", "trace"]


@dataclass(frozen=True)
class DeviceSpec:
    """One device model: readable facts plus the hidden parameters of its cost model."""

    name: str
    role: Role
    ms_per_sample: float
    soc: str = ""
    total_memory_mb: float | None = None
    cores_mhz: tuple[float, ...] = ()
    overhead_ms: float = 30.0
    battery_mah: float = 3000.0
    active_power_w: float = 3.0
    load_temp_c: float = 58.0
    throttle_onset_c: float = 46.0
    throttle_per_c: float = 0.014
    heat_tau_s: float = 50.0
    cool_tau_s: float = 110.0
    background_load: float = 0.07
    unit_sd: float = 0.05
    noise_sd: float = 0.05
    kbps: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def cpu_freq_sum(self) -> float | None:
        """Sum over cores of the maximum frequency (MHz), what Android reads from cpufreq."""
        return float(sum(self.cores_mhz)) if self.cores_mhz else None

    @property
    def energy_per_cpu_time(self) -> float:
        """Nominal % battery per CPU second (power profile over nominal capacity at 3.85 V)."""
        return self.active_power_w / (self.battery_mah * 3.85 * 3.6) * 100.0


def parse_cores(text: str) -> tuple[float, ...]:
    """``"1x2840+3x2420+4x1780"`` → one max frequency per core."""
    cores: list[float] = []
    for cluster in text.split("+"):
        count, mhz = cluster.lower().split("x")
        cores.extend([float(mhz)] * int(count))
    return tuple(cores)


_FLOATS = [
    "ms_per_sample",
    "overhead_ms",
    "battery_mah",
    "active_power_w",
    "load_temp_c",
    "throttle_onset_c",
    "throttle_per_c",
    "heat_tau_s",
    "cool_tau_s",
    "background_load",
    "unit_sd",
    "noise_sd",
    "total_memory_mb",
]


def load_catalog(path: str | Path = CATALOG_PATH) -> list[DeviceSpec]:
    """Read the catalogue CSV (or a FedScale trace, by extension .pkl/.json/.trace.csv)."""
    path = Path(path)
    if path.suffix in {".pkl", ".pickle", ".json"} or path.name.endswith(".trace.csv"):
        return load_fedscale_trace(path)
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    specs = [_spec_from_row(row) for row in rows]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: duplicate device model names")
    return specs


def _spec_from_row(row: dict[str, str]) -> DeviceSpec:
    values: dict[str, Any] = {k: float(row[k]) for k in _FLOATS if row.get(k, "").strip()}
    role = row["role"].strip()
    if role not in ("bootstrap", "test"):
        raise ValueError(f"{row['name']}: role must be bootstrap or test, got {role!r}")
    return DeviceSpec(
        name=row["name"].strip(),
        role=role,  # type: ignore[arg-type]
        soc=row.get("soc", "").strip(),
        cores_mhz=parse_cores(row["cores_mhz"]) if row.get("cores_mhz", "").strip() else (),
        **values,
    )


def split_roles(specs: Iterable[DeviceSpec]) -> tuple[list[DeviceSpec], list[DeviceSpec]]:
    """(bootstrap devices, test devices); the two sets never share a device model."""
    specs = list(specs)
    boot = [s for s in specs if s.role == "bootstrap"]
    test = [s for s in specs if s.role != "bootstrap"]
    if {s.name for s in boot} & {s.name for s in test}:
        raise ValueError("a device model is both a bootstrap and a test device")
    return boot, test


class _PlainUnpickler(pickle.Unpickler):
    """FedScale ships its trace as a pickle of plain dicts: refuse anything else (no code execution)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a device trace")


def load_fedscale_trace(path: str | Path, *, defaults: DeviceSpec | None = None) -> list[DeviceSpec]:
    """FedScale device capacity: ``{client_id: {"computation": ms/sample, "communication": kbps}}``.

    Accepts FedScale's pickle, the same mapping as JSON, or a CSV with columns
    ``client_id,computation,communication``.
    """
    path = Path(path)
    if path.suffix == ".json":
        mapping = json.loads(path.read_text())
    elif path.suffix == ".csv":
        with path.open(newline="") as fh:
            mapping = {
                r["client_id"]: {"computation": r["computation"], "communication": r["communication"]}
                for r in csv.DictReader(fh)
            }
    else:
        mapping = _PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    if not isinstance(mapping, dict):
        raise ValueError(f"{path}: expected a mapping client id → capacity")
    base = defaults or DeviceSpec(name="", role="trace", ms_per_sample=1.0)
    specs = []
    for client, cap in mapping.items():
        ms = float(cap["computation"])
        if not ms > 0:
            raise ValueError(f"{path}: client {client} has computation {ms} ms per sample")
        specs.append(
            replace(
                base,
                name=f"fedscale-{client}",
                role="trace",
                ms_per_sample=ms,
                kbps=float(cap["communication"]),
            )
        )
    return specs
