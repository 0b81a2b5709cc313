"""One self-contained ONNX file for inference: the parameter inputs become initializers."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from fleet_protocol import Manifest


def bake_weights(infer_onnx: bytes, manifest: Manifest, params: np.ndarray) -> bytes:
    """The inference graph with ``params`` inside; its only input is ``x``."""
    model = onnx.load_from_string(infer_onnx)
    graph = model.graph
    tensors = manifest.split(params)
    kept = [i for i in graph.input if i.name not in tensors]
    missing = set(tensors) - {i.name for i in graph.input}
    if missing:
        raise ValueError(f"inference graph lacks inputs {sorted(missing)}")
    del graph.input[:]
    graph.input.extend(kept)
    graph.initializer.extend(
        numpy_helper.from_array(np.ascontiguousarray(t), name) for name, t in tensors.items()
    )
    return model.SerializeToString()
