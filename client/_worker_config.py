"""What a worker is given (``WorkerConfig``) and what each task it finishes reports (``TaskReport``)."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ._attacks import AttackName
from ._data import DeviceData
from ._energy import EnergyModel
from ._ledger import DevicePrivacy

__all__ = ["TaskReport", "WorkerConfig", "default_device_model"]


def default_device_model() -> str:
    """A device model name for desktops: OS and machine, e.g. "Linux x86_64"."""
    return f"{platform.system() or 'unknown'} {platform.machine() or 'unknown'}".strip()


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs, as plain values (the CLI builds one from its options).

    ``min_ms_per_sample`` emulates a slower phone: after computing, the worker sleeps until the
    task took at least ``examples * min_ms_per_sample`` ms (the examples really computed, at most the
    N held); the reported compute time includes the sleep. ``delay_ms_per_sample`` instead adds
    ``examples * delay_ms_per_sample`` ms on top of
    the real compute, however long that took (what a benchmark against another system needs: the same
    added delay on both sides, bench/peer.py). ``max_consecutive_errors`` bounds repeated non-network
    failures (network failures are retried forever, with capped exponential backoff).
    """

    base_url: str
    enrollment_key: str
    data: str | Path | DeviceData
    device_model: str = field(default_factory=default_device_model)
    threads: int = 1
    min_ms_per_sample: float | None = None
    delay_ms_per_sample: float | None = None
    max_tasks: int | None = None
    max_seconds: float | None = None
    seed: int | None = None
    min_retry_after: float = 0.5
    max_retry_after: float = 300.0
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    max_consecutive_errors: int | None = 5
    push_attempts: int = 3
    timeout: float = 60.0
    verify: bool | str = True
    cert: str | None = None
    energy_model: EnergyModel = field(default_factory=EnergyModel)
    wire_encoding: Literal["float32", "float16"] = "float32"  # of pulled parameters and pushed gradients
    attack: AttackName | None = None  # Byzantine behaviour for experiments (client/_attacks/); None: honest
    attack_params: Mapping[str, str | float | int] = field(default_factory=dict)  # e.g. {"k": 5}
    # the device's install secret and own privacy ledger (client/_state.py, _ledger.py); None: in memory
    state_dir: str | Path | None = None
    privacy: DevicePrivacy = field(default_factory=DevicePrivacy)  # its budget, δ, σ floor, q cap


@dataclass(frozen=True)
class TaskReport:
    """What one finished task did and what the server said about it."""

    task_id: str
    model_id: str
    version: int
    staleness: int
    weight: float
    batch_size: int
    loss: float
    compute_time_ms: float
    predicted_time_ms: float | None
    slo_time_ms: float | None
    energy: float | None
    energy_source: str
    current_version: int
    applied: bool
    duplicate: bool
    slo_energy: float | None = None
