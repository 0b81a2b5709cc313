"""Pydantic validation of the JSON that devices and admins send (binary tensors never go through these).

The device messages' shapes are the wire contract's (``fleet_protocol``): answers are its dataclasses
served as they are; the inputs below add the bounds a server must enforce and are checked against the
contract's fields in tests/test_ports.py."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt


class Input(BaseModel):
    """Base of every JSON input: a non-finite number (``NaN``, ``Infinity``) is a validation error."""

    model_config = ConfigDict(allow_inf_nan=False)


# Physical ranges of the device features: wider than any phone, narrow enough that the profiler's
# arithmetic stays finite (a feature of 1e300 would overflow its standardised products).
MAX_MEMORY_BYTES = 1e13  # 10 TB
MAX_CPU_FREQ_SUM_MHZ = 1e6  # a thousand 1 GHz cores
MAX_ENERGY_PER_CPU_S = 100.0  # % battery per CPU second: the whole battery in one second
# Examples of one class on one device, or in one mini-batch: far above any phone, and far enough below
# int64's range that the sums the core takes stay exact (a larger JSON integer was a 500 in numpy).
MAX_COUNT = 10**9
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
# Model versions are stored in 32-bit integer columns (PostgreSQL's integer): a larger version in a request
# is refused as input instead of failing in the database (it was a 500 on the params and inference routes).
MAX_VERSION = 2**31 - 1
# PostgreSQL text cannot hold NUL: text that reaches the store is refused with a 422 if it has one.
NO_NUL = r"^[^\x00]*$"


class EnrollIn(Input):
    enrollment_key: str = Field(max_length=256)
    device_model: str = Field(min_length=1, max_length=120, pattern=NO_NUL)
    install_secret: str | None = Field(
        None,
        min_length=22,
        max_length=128,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="the install's own random secret (urlsafe): enrolling again with it returns the same "
        "device_id, so the device's privacy ledger goes on; only its SHA-256 is stored",
    )
    attestation: str | None = Field(
        None,
        max_length=16_384,
        pattern=r"^[A-Za-z0-9_.=-]+$",
        description="a device attestation token (Play Integrity: docs/attestation.md) bound to this "
        "enrollment; checked by the coordinator's verifier (none is configured by default: ignored)",
    )


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

    model_config = ConfigDict(
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {
                    "device_model": "Galaxy S7",
                    "features": {
                        "available_memory": 1.2e9,
                        "total_memory": 4.0e9,
                        "temperature": 35.0,
                        "cpu_freq_sum": 12000.0,
                        "energy_per_cpu_time": None,
                    },
                    "label_counts": [20, 0, 0, 180, 0, 0, 0, 0, 0, 0],
                }
            ]
        },
    )
    device_model: str | None = Field(None, max_length=120, pattern=NO_NUL)
    features: Features = Features()
    label_counts: list[Count] | None = Field(
        None,
        max_length=10_000,
        description="local examples per class, summing to local_examples when both are given; refused when"
        " DP is on (a DP device sends none)",
    )
    local_examples: StrictInt | None = Field(  # strict: "6000" and true are refused (finding 12)
        None,
        ge=1,
        le=10**9,
        description="the device's local dataset size N (required when DP is on, then bucket_examples(N))",
    )


class ResultMeta(Input):
    """The ``meta`` part of a pushed result."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra={
            "examples": [
                {
                    "label_counts": [3, 0, 0, 2, 0, 0, 0, 0, 0, 5],
                    "loss": 2.1,
                    "compute_time_ms": 84.0,
                    "batch_size": 10,
                }
            ]
        },
    )
    label_counts: list[Count] | None = Field(
        None, max_length=10_000, description="the mini-batch's examples per class; null (required) under DP"
    )
    loss: float | None = Field(
        None, description="the mini-batch's mean training loss; null (required) under DP"
    )
    compute_time_ms: float
    energy: float | None = None
    batch_size: int = Field(
        ge=1,
        le=MAX_COUNT,
        description="sum of label_counts, at most the granted size; under DP the terms' expected_batch B",
    )
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
    has_dp_graph: bool = False  # GET .../graphs/dp.onnx serves its DP-SGD graph
    dp: bool = False  # the coordinator runs DP: a device asks without label counts, with a bucketed N


class ParamOut(BaseModel):
    """One parameter tensor's slice of the flat float32 buffer."""

    name: str
    shape: list[int]
    offset: int = Field(description="index of its first value in the flat buffer")
    size: int = Field(description="number of values (the product of shape)")


class ManifestOut(BaseModel):
    """The manifest as served (``fleet_protocol.Manifest.to_json``): how to split the flat parameter and
    gradient buffers, and the names of the training graph's inputs and outputs (docs/model-bundles.md)."""

    name: str
    params: list[ParamOut]
    input_shape: list[int] = Field(description="one example's shape, without the batch dimension")
    num_classes: int
    x_name: str
    y_name: str
    loss_name: str
    logits_name: str
    grad_names: list[str] = Field(description="the training graph's gradient outputs, in params order")
    dp_grad_names: list[str] = Field(
        default_factory=list, description="the DP graph's clipped-sum outputs (empty: no DP graph)"
    )
    clip_name: str = Field("clip", description="the DP graph's scalar input, the clip bound C")
    learning_rate: float | None = Field(
        None, description="the default strategy's step for this model when its rate is not set"
    )
    max_step: float | None = Field(
        None, description="and its longest step relative to the parameters' norm (None: uncapped)"
    )
    num_params: int


class VersionOut(BaseModel):
    """A retained version and where it came from (docs/console.md, "Models")."""

    version: int
    created_at: float
    origin: Literal["initial", "trained", "promotion", "rollback"] = Field(
        description="initial: the bundle's parameters; trained: pushes on source_version; promotion: "
        "source_version's parameters promoted; rollback: source_version's parameters restored"
    )
    source_version: int | None = Field(description="the version it came from (None for version 0)")
    note: str | None = Field(description="the operator's note (plain text, at most 500 characters)")


class StopCriterion(Input):
    target_accuracy: float | None = Field(None, gt=0, le=1)
    max_versions: int | None = Field(None, ge=1, le=MAX_VERSION)


class EvaluationOut(BaseModel):
    version: int
    accuracy: float
    loss: float
    at: float
    reference: float | None = None  # the metric of the model FLEET_EVAL_REFERENCE_AGE_S older, same data


class JoinCodeIn(Input):
    """A join code to create (server/core/join_codes.py has the bounds the console uses too)."""

    minutes: StrictInt = Field(15, ge=1, le=1440, description="how long the code enrolls devices")
    max_devices: StrictInt = Field(5, ge=1, le=1000, description="how many devices it may enroll")


class JoinCodeOut(BaseModel):
    code: str = Field(description="the code, shown once (only its SHA-256 is stored)")
    url: str = Field(description="<public URL>/device/#join=<code>: what a phone opens (the QR code's text)")
    expires_at: float = Field(description="unix seconds: from then on the code enrolls nothing")
    key_id: str = Field(description="its enrollment key's id: POST /v1/admin/enrollment-keys/{key_id}/revoke")
