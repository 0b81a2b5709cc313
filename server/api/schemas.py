"""Pydantic validation of the JSON that devices and admins send (binary tensors never go through these).

The device messages' shapes are the wire contract's (``fleet_protocol``): answers are its dataclasses
served as they are; the inputs below add the bounds a server must enforce and are checked against the
contract's fields in tests/test_ports.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EnrollIn(BaseModel):
    enrollment_key: str = Field(max_length=256)
    device_model: str = Field(min_length=1, max_length=120)


class EnrollOut(BaseModel):
    device_id: str
    token: str


class Features(BaseModel):
    model_config = ConfigDict(extra="forbid")
    available_memory: float | None = Field(None, ge=0)
    total_memory: float | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=-50, le=150)
    cpu_freq_sum: float | None = Field(None, ge=0)
    energy_per_cpu_time: float | None = Field(None, ge=0)


class TaskIn(BaseModel):
    """A task request; the device model given at enrollment is the one the profiler uses."""

    device_model: str | None = Field(None, max_length=120)
    features: Features = Features()
    label_counts: list[int] = Field(max_length=10_000)


class ResultMeta(BaseModel):
    """The ``meta`` part of a pushed result."""

    model_config = ConfigDict(extra="forbid")
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


class StopCriterion(BaseModel):
    target_accuracy: float | None = Field(None, gt=0, le=1)
    max_versions: int | None = Field(None, ge=1)


class EvaluationOut(BaseModel):
    version: int
    accuracy: float
    loss: float
    at: float
