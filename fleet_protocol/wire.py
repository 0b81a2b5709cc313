"""The device protocol's messages and tensor encodings, written once for the server and the client.

JSON metadata travels as these dataclasses (``asdict`` to send, ``from_json`` to read leniently: unknown
keys are ignored so either side may add fields); tensors travel as raw little-endian float32 or float16
bytes, never as JSON lists. Needs only numpy: the device imports this and nothing of the server.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np

__all__ = [
    "GAUSSIAN_MECHANISM",
    "META_HEADER",
    "NOISE_SAMPLERS",
    "NORM_LAPLACE_MECHANISM",
    "LOCAL_SGD_MECHANISM",
    "WIRE_DTYPES",
    "Encoding",
    "PushMeta",
    "PushOutcome",
    "Rejection",
    "TaskAsk",
    "TaskDecline",
    "TaskGrant",
    "WireError",
    "decode_tensor",
    "encode_multipart",
    "encode_push",
    "push_digest",
]

Encoding = Literal["float32", "float16"]
WIRE_DTYPES: dict[str, str] = {"float32": "<f4", "float16": "<f2"}
META_HEADER = "Fleet-Meta"  # a raw push carries its PushMeta as compact JSON in this header
TRAINING_FINISHED = "training_finished"


class WireError(ValueError):
    """A message or tensor body that does not follow the protocol."""


def _known(cls: type, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise WireError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class TaskAsk:
    """``POST /v1/tasks``: the device's state and, without DP, its local label counts (one per class).

    Under DP (the coordinator's active model says ``dp``) the device sends no label counts (a count that
    rises by one would reveal an example's label) and ``local_examples`` as ``bucket_examples(N)``."""

    label_counts: list[int] | None = None  # None (left out of the JSON) under DP; sums to N when both given
    features: dict[str, float | None] = field(default_factory=dict)
    device_model: str | None = None
    local_examples: int | None = None  # the device's N (bucketed under DP); required when DP is on


@dataclass(frozen=True)
class TaskGrant:
    """``201`` of ``POST /v1/tasks``: the task, the mini-batch size L, and where to fetch its inputs."""

    task_id: str
    model_id: str
    version: int
    batch_size: int
    lease_seconds: float | None = None
    lease_deadline: float | None = None
    slo_time_ms: float | None = None
    predicted_time_ms: float | None = None
    similarity: float | None = None
    dp: dict[str, Any] | None = None
    params_url: str | None = None
    manifest_url: str | None = None
    train_graph_url: str | None = None
    slo_energy: float | None = None  # % battery a task may use (None: no energy SLO)
    predicted_energy: float | None = None

    @classmethod
    def from_json(cls, data: Any) -> TaskGrant:
        values = _known(cls, data)
        try:
            values.update(
                task_id=str(data["task_id"]),
                model_id=str(data["model_id"]),
                version=int(data["version"]),
                batch_size=int(data["batch_size"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WireError(f"malformed task grant: {exc!r}") from exc
        return cls(**values)


GAUSSIAN_MECHANISM = "dpsgd-poisson-gaussian/1"
NORM_LAPLACE_MECHANISM = "clip-normlaplace/1"  # AUDP/MAPA (issue 16): pure ε per step
LOCAL_SGD_MECHANISM = "local-sgd-round/1"  # van Dijk et al. (issue 16): one round of local SGD, noised sum
NOISE_SAMPLERS = (
    "exact",
    "paper",
)  # norm-Laplace radius: Gamma(d, λ) (the ε-DP one) or Exp(λ) (the paper's variance)


@dataclass(frozen=True)
class DPTerms:
    """A DP task's terms (``TaskGrant.dp``), by ``mechanism``.

    ``dpsgd-poisson-gaussian/1``: Poisson-sample at ``sampling_rate``, clip each example's gradient to
    ``clip``, add N(0, (noise_multiplier·clip)²) to the sum, divide by ``expected_batch``.
    ``clip-normlaplace/1``: draw ``expected_batch`` b examples (distinct unless ``replacement``), clip each
    to ``clip`` G, average, add noise of density ∝ exp(−ε‖η‖/ΔS) with ε = ``epsilon_step`` and ΔS =
    ``sensitivity`` ≥ 2G/b, drawn by the ``noise`` sampler; ``noise_multiplier`` is then λ/G = ΔS/(εG).
    ``local-sgd-round/1``: round ``round``: Poisson-sample at q = ``local_steps``/N, one local SGD step of
    size ``step_size`` per sampled example (gradient clipped to ``clip``; 0 = unclipped), push the sum of
    the clipped gradients plus N(0, (noise_multiplier·clip)²) once; ``expected_batch`` = ``local_steps``."""

    mechanism: str
    clip: float
    noise_multiplier: float
    sampling_rate: float
    expected_batch: int
    delta: float | None = None
    epsilon_after: float | None = None  # the device's ε once this task is counted
    graph_url: str | None = None
    epsilon_step: float | None = None  # norm-Laplace: this step's pure ε
    sensitivity: float | None = None  # norm-Laplace: ΔS of the averaged clipped gradient
    noise: str | None = None  # norm-Laplace: one of NOISE_SAMPLERS
    replacement: bool = False  # norm-Laplace: draw the batch with replacement (the paper's Alg. 1)
    round: int | None = None  # local-sgd-round: the client's round i
    local_steps: int | None = None  # local-sgd-round: s_{i,c}, the expected local iterations
    step_size: float | None = None  # local-sgd-round: the round step η̄_i

    @classmethod
    def from_json(cls, data: Any) -> DPTerms:
        try:
            terms = cls(**_known(cls, data))
        except TypeError as exc:
            raise WireError(f"DPTerms: {exc}") from exc
        unclipped = terms.mechanism == LOCAL_SGD_MECHANISM and terms.clip == 0 and terms.noise_multiplier == 0
        clip_ok = terms.clip > 0 or unclipped
        if not (clip_ok and terms.noise_multiplier >= 0 and 0 < terms.sampling_rate <= 1):
            raise WireError(f"DPTerms out of range: {terms}")
        gaussian = terms.mechanism in (GAUSSIAN_MECHANISM, LOCAL_SGD_MECHANISM)
        if gaussian and terms.clip > 0 and not terms.noise_multiplier > 0:  # issue 27: σ = 0 is no DP at all
            raise WireError(
                f"DPTerms: {terms.mechanism} needs noise_multiplier > 0, got {terms.noise_multiplier}"
            )
        if terms.expected_batch < 1:
            raise WireError(f"DPTerms: expected_batch must be >= 1, got {terms.expected_batch}")
        if terms.mechanism == NORM_LAPLACE_MECHANISM:
            eps, sens = terms.epsilon_step, terms.sensitivity
            if eps is None or sens is None or not (eps > 0 and sens > 0) or terms.noise not in NOISE_SAMPLERS:
                raise WireError(
                    f"DPTerms: {terms.mechanism} needs epsilon_step, sensitivity > 0 and noise in"
                    f" {NOISE_SAMPLERS}, got {terms}"
                )
        if terms.mechanism == LOCAL_SGD_MECHANISM:
            steps, size = terms.local_steps, terms.step_size
            if terms.round is None or steps is None or size is None or not (steps >= 1 and size > 0):
                raise WireError(f"DPTerms: {terms.mechanism} needs round, local_steps >= 1, step_size > 0")
        return terms


@dataclass(frozen=True)
class TaskDecline:
    """``POST /v1/tasks/{id}/decline``: the device gives a granted task back unrun, because it cannot run its
    terms (an unknown mechanism, DP terms without their fields, terms its privacy policy or budget
    refuses). ``reason`` is a short code (``[a-z0-9_]``, e.g. ``privacy_terms_refused``), ``detail`` a
    sentence; the coordinator counts and audits it and ends the lease, and the device asks again later."""

    reason: str
    detail: str = ""


@dataclass(frozen=True)
class Rejection:
    """``503``/``410`` of ``POST /v1/tasks``: why no task now, and when to ask again."""

    reason: str
    retry_after: float
    detail: str

    @property
    def finished(self) -> bool:
        """Training is over: the device should stop asking (served as 410)."""
        return self.reason == TRAINING_FINISHED


@dataclass(frozen=True)
class PushMeta:
    """The JSON half of ``POST /v1/tasks/{id}/result``; the gradient is the binary half.

    A DP task's push carries nothing data-dependent but its noised gradient: ``loss`` and ``label_counts``
    null, ``batch_size`` the terms' expected_batch B, time and energy scaled to B (the coordinator refuses
    anything else). Without DP the loss and the mini-batch's label counts (summing to batch_size) are sent."""

    compute_time_ms: float
    batch_size: int
    label_counts: list[int] | None = None  # null under DP
    loss: float | None = None  # null under DP
    energy: float | None = None
    encoding: Encoding = "float32"  # of the gradient bytes


@dataclass(frozen=True)
class PushOutcome:
    """``200`` of a push: the staleness τ seen, the weight applied, the model's version after it.

    ``queued``: the scale-out topology answered once the push was durably queued for the aggregator; the
    weight (0) and version (the worker's newest) are not known yet, τ is the staleness at queueing."""

    task_id: str
    staleness: int
    weight: float
    version: int
    applied: bool
    duplicate: bool = False
    tau_thres: float | None = None  # the strategy's staleness threshold when it weighed this gradient
    queued: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The answer as stored for idempotent retries (a retry is told ``duplicate`` on top)."""
        return {
            "task_id": self.task_id,
            "staleness": self.staleness,
            "weight": self.weight,
            "version": self.version,
            "applied": self.applied,
            "tau_thres": self.tau_thres,
            "queued": self.queued,
        }

    @classmethod
    def from_json(cls, data: Any, *, task_id: str | None = None) -> PushOutcome:
        values = _known(cls, data)
        try:
            values.update(
                task_id=str(data.get("task_id", task_id)),
                staleness=int(data["staleness"]),
                weight=float(data["weight"]),
                version=int(data["version"]),
                applied=bool(data.get("applied", True)),
                duplicate=bool(data.get("duplicate", False)),
                queued=bool(data.get("queued", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WireError(f"malformed push answer: {exc!r}") from exc
        return cls(**values)


def decode_tensor(data: bytes, encoding: str = "float32") -> np.ndarray:
    """A flat float32 array from a raw little-endian float32 or float16 body."""
    dtype = WIRE_DTYPES.get(encoding)
    if dtype is None:
        raise WireError(f"unknown tensor encoding {encoding!r}; known: {sorted(WIRE_DTYPES)}")
    width = np.dtype(dtype).itemsize
    if len(data) % width:
        raise WireError(f"body of {len(data)} bytes is not a multiple of {width} bytes ({encoding})")
    return np.frombuffer(data, dtype=dtype).astype(np.float32)


def push_digest(meta: bytes, gradient: bytes) -> str:
    """Identifies a push body exactly: a retry with the same digest gets the original answer."""
    digest = hashlib.sha256(meta)  # fed in parts: the same digest, without copying the gradient
    digest.update(b"\x00")
    digest.update(gradient)
    return digest.hexdigest()


def _push_parts(meta: dict[str, Any], gradient: np.ndarray, encoding: str) -> tuple[dict[str, Any], bytes]:
    if encoding not in WIRE_DTYPES:
        raise WireError(f"unknown tensor encoding {encoding!r}; known: {sorted(WIRE_DTYPES)}")
    if encoding != "float32":
        meta = {**meta, "encoding": encoding}
    return meta, np.ascontiguousarray(gradient, dtype=WIRE_DTYPES[encoding]).tobytes()


def encode_push(
    meta: dict[str, Any], gradient: np.ndarray, encoding: str = "float32"
) -> tuple[dict[str, str], bytes]:
    """``(headers, body)`` of a result push: the gradient's raw bytes (<f4 or <f2) as the body and the
    meta as compact JSON in the ``Fleet-Meta`` header, so neither side builds or parses multipart."""
    meta, body = _push_parts(meta, gradient, encoding)
    meta_json = json.dumps(meta, allow_nan=False, separators=(",", ":"))
    return {"Content-Type": "application/octet-stream", META_HEADER: meta_json}, body


def encode_multipart(
    meta: dict[str, Any], gradient: np.ndarray, encoding: str = "float32"
) -> tuple[str, bytes]:
    """``(content_type, body)`` of a result push in the multipart form the server also accepts: parts
    ``meta`` (JSON) and ``gradient`` (<f4 or <f2), for clients that only speak HTML forms."""
    meta, grad_bytes = _push_parts(meta, gradient, encoding)
    meta_bytes = json.dumps(meta, allow_nan=False).encode()
    while True:
        boundary = f"fleet-{secrets.token_hex(16)}"
        marker = boundary.encode()
        if marker not in grad_bytes and marker not in meta_bytes:
            break
    body = b"".join(
        [
            b"--" + marker + b"\r\n",
            b'Content-Disposition: form-data; name="meta"\r\n',
            b"Content-Type: application/json\r\n\r\n",
            meta_bytes,
            b"\r\n--" + marker + b"\r\n",
            b'Content-Disposition: form-data; name="gradient"; filename="gradient.bin"\r\n',
            b"Content-Type: application/octet-stream\r\n\r\n",
            grad_bytes,
            b"\r\n--" + marker + b"--\r\n",
        ]
    )
    return f"multipart/form-data; boundary={boundary}", body
