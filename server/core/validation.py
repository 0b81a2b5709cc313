"""What a pushed result must satisfy before it may touch the model."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from fleet_protocol import Manifest
from server.core.errors import InvalidInput
from server.core.types import TaskRequest, TaskResult


def validate_features(features: Mapping[str, float | None]) -> None:
    """Every feature is a finite number or ``None``: the profiler must never see NaN or Inf, whichever
    adapter built the request (the API also bounds them to physical ranges). Raises InvalidInput."""
    for name, value in features.items():
        if value is not None and not (isinstance(value, int | float) and math.isfinite(value)):
            raise InvalidInput(f"feature {name!r} must be a finite number or null, got {value!r}")


def request_counts(request: TaskRequest, num_classes: int, *, dp: bool) -> np.ndarray | None:
    """The request's label counts, checked (None: not sent). Refused under DP: a count that rises by one
    between two requests reveals an example's label, and nothing noises them. Otherwise ``num_classes``
    non-negative counts that sum to ``local_examples`` when the device reports it too. Raises InvalidInput."""
    if request.label_counts is None:
        return None
    if dp:
        raise InvalidInput(
            "DP is on: a task request may not carry label_counts (they would reveal the labels of the"
            " device's examples); send local_examples (bucketed) only"
        )
    counts = np.asarray(request.label_counts)
    if counts.shape != (num_classes,) or (counts < 0).any():
        raise InvalidInput(f"label_counts must be {num_classes} non-negative counts")
    examples = request.local_examples
    if examples is not None and int(counts.sum()) != examples:
        raise InvalidInput(f"label_counts sum to {int(counts.sum())}, not to local_examples ({examples})")
    return counts


def norm_bound(value: float) -> float:
    """``value`` as the push norm bound: finite and positive, or ValueError. An infinite bound would switch
    the check off (issue 29: a push of 1e30 everywhere was applied), so no setting path may give one."""
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"max_gradient_norm must be positive and finite, got {value!r}")
    return float(value)


def validate_result(
    manifest: Manifest, result: TaskResult, *, max_gradient_norm: float, granted_batch_size: int | None = None
) -> None:
    """Shape, finiteness and norm of the gradient; consistency of the metadata. Raises InvalidInput.

    The label counts (when sent) must sum to the reported batch size, which may not exceed the granted one:
    I-Prof learns the device's speed from (batch size, time), so a wrong size would teach it a lie."""
    gradient = result.gradient
    if gradient.shape != (manifest.num_params,):
        raise InvalidInput(f"gradient must hold {manifest.num_params} float32 values, got {gradient.size}")
    if not np.isfinite(gradient).all():
        raise InvalidInput("gradient contains NaN or Inf")
    norm = float(np.linalg.norm(gradient))
    if norm > max_gradient_norm:
        raise InvalidInput(f"gradient norm {norm:.3g} exceeds the bound {max_gradient_norm:.3g}")
    counts = result.label_counts
    if result.batch_size < 1:
        raise InvalidInput("batch_size must be >= 1")
    if counts is not None and (counts.shape != (manifest.num_classes,) or (counts < 0).any()):
        raise InvalidInput(f"label_counts must be {manifest.num_classes} non-negative counts")
    if counts is not None and int(counts.sum()) != result.batch_size:
        raise InvalidInput("label_counts must sum to batch_size (>= 1)")
    if granted_batch_size is not None and result.batch_size > granted_batch_size:
        raise InvalidInput(
            f"batch_size {result.batch_size} exceeds the granted batch size {granted_batch_size}"
        )
    loss_ok = result.loss is None or np.isfinite(result.loss)
    if not loss_ok or not np.isfinite(result.compute_time_ms) or result.compute_time_ms < 0:
        raise InvalidInput("loss and compute_time_ms must be finite (time >= 0)")
    if result.energy is not None and (not np.isfinite(result.energy) or result.energy < 0):
        raise InvalidInput("energy must be finite and >= 0")
