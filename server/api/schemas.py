"""Pydantic validation of the JSON that devices and admins send (binary tensors never go through these).

The device messages' shapes are the wire contract's (``fleet_protocol``): answers are its dataclasses
served as they are; the inputs below add the bounds a server must enforce and are checked against the
contract's fields in tests/test_ports.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Input(BaseModel):
    """Base of every JSON input: a non-finite number (``NaN``, ``Infinity``) is a validation error."""

    model_config = ConfigDict(allow_inf_nan=False)


# Physical ranges of the device features: wider than any phone, narrow enough that the profiler's
# arithmetic stays finite (a feature of 1e300 would overflow its standardised products).
MAX_MEMORY_BYTES = 1e13  # 10 TB
MAX_CPU_FREQ_SUM_MHZ = 1e6  # a thousand 1 GHz cores
MAX_ENERGY_PER_CPU_S = 100.0  # % battery per CPU second: the whole battery in one second


class EnrollIn(Input):
    enrollment_key: str = Field(max_length=256)
    device_model: str = Field(min_length=1, max_length=120)


class EnrollOut(BaseModel):
    device_id: str
    token: str


class Features(Input):
    """Device state the profiler reads: finite and within a physical range, or ``null`` (unreadable)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    available_memory: float | None = Field(None, ge=0, le=MAX_MEMORY_BYTES)  # bytes
    total_memory: float | None = Field(None, ge=0, le=MAX_MEMORY_BYTES)  # bytes
    temperature: float | None = Field(None, ge=-50, le=150)  # °C
    cpu_freq_sum: float | None = Field(None, ge=0, le=MAX_CPU_FREQ_SUM_MHZ)  # MHz
    energy_per_cpu_time: float | None = Field(None, ge=0, le=MAX_ENERGY_PER_CPU_S)


class TaskIn(Input):
    """A task request; the device model given at enrollment is the one the profiler uses."""

    device_model: str | None = Field(None, max_length=120)
    features: Features = Features()
    label_counts: list[int] = Field(max_length=10_000)


class ResultMeta(Input):
    """The ``meta`` part of a pushed result."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    label_counts: list[int] = Field(max_length=10_000)
    loss: float
    compute_time_ms: float
    energy: float | None = None
    batch_size: int = Field(ge=1)
    encoding: Literal["float32", "float16"] = "float32"  # of the gradient part


class ModelOut(BaseModel):
    model_id: str
    name: str
    num_params: int
    num_classes: int
    input_shape: list[int]
    current_version: int
    active: bool
    status: str
    created_at: float


class VersionOut(BaseModel):
    version: int
    created_at: float


class StopCriterion(Input):
    target_accuracy: float | None = Field(None, gt=0, le=1)
    max_versions: int | None = Field(None, ge=1)


class EvaluationOut(BaseModel):
    version: int
    accuracy: float
    loss: float
    at: float
