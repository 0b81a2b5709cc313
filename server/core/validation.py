"""What a pushed result must satisfy before it may touch the model."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from fleet_protocol import Manifest
from server.core.errors import InvalidInput
from server.core.types import TaskResult


def validate_features(features: Mapping[str, float | None]) -> None:
    """Every feature is a finite number or ``None``: the profiler must never see NaN or Inf, whichever
    adapter built the request (the API also bounds them to physical ranges). Raises InvalidInput."""
    for name, value in features.items():
        if value is not None and not (isinstance(value, int | float) and math.isfinite(value)):
            raise InvalidInput(f"feature {name!r} must be a finite number or null, got {value!r}")


def validate_result(
    manifest: Manifest, result: TaskResult, *, max_gradient_norm: float, granted_batch_size: int | None = None
) -> None:
    """Shape, finiteness and norm of the gradient; consistency of the metadata. Raises InvalidInput.

    The label counts must sum to the reported batch size, and that size may not exceed the granted one:
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
    if counts.shape != (manifest.num_classes,) or (counts < 0).any():
        raise InvalidInput(f"label_counts must be {manifest.num_classes} non-negative counts")
    if result.batch_size < 1 or int(counts.sum()) != result.batch_size:
        raise InvalidInput("label_counts must sum to batch_size (>= 1)")
    if granted_batch_size is not None and result.batch_size > granted_batch_size:
        raise InvalidInput(
            f"batch_size {result.batch_size} exceeds the granted batch size {granted_batch_size}"
        )
    if not np.isfinite(result.loss) or not np.isfinite(result.compute_time_ms) or result.compute_time_ms < 0:
        raise InvalidInput("loss and compute_time_ms must be finite (time >= 0)")
    if result.energy is not None and (not np.isfinite(result.energy) or result.energy < 0):
        raise InvalidInput("energy must be finite and >= 0")
