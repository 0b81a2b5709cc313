"""What a pushed result must satisfy before it may touch the model."""

from __future__ import annotations

import numpy as np

from fleet_protocol import Manifest
from server.core.errors import InvalidInput
from server.core.types import TaskResult


def validate_result(manifest: Manifest, result: TaskResult, *, max_gradient_norm: float) -> None:
    """Shape, finiteness and norm of the gradient; consistency of the metadata. Raises InvalidInput."""
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
    if not np.isfinite(result.loss) or not np.isfinite(result.compute_time_ms) or result.compute_time_ms < 0:
        raise InvalidInput("loss and compute_time_ms must be finite (time >= 0)")
    if result.energy is not None and (not np.isfinite(result.energy) or result.energy < 0):
        raise InvalidInput("energy must be finite and >= 0")
