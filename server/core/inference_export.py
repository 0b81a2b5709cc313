"""One self-contained ONNX file for inference: the parameter inputs become initializers.

``export_inference`` is the one way out for both the API's and the console's downloads: the bare
inference graph takes the parameters as inputs, so it is not a runnable model on its own."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from fleet_protocol import Manifest
from server.core.catalog import Catalog
from server.core.types import Snapshot


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


def export_inference(
    catalog: Catalog, model_id: str, version: int | None = None, served: Snapshot | None = None
) -> tuple[int, bytes, bool]:
    """(version, ONNX bytes, averaged): the inference graph with that version's weights (default: the
    head's) inside. ``served``, the coordinator's snapshot: at its version the served parameters go in,
    the strategy's average when it keeps one (``averaged``: not a version's own, so not immutable; older
    versions are exported as trained). NotFound for an unknown model or version, Gone past retention."""
    version = catalog.record(model_id).current_version if version is None else version
    averaged = (
        served is not None and served.averaged and (served.model_id, served.version) == (model_id, version)
    )
    params = served.params if averaged and served is not None else catalog.params(model_id, version)
    return (
        version,
        bake_weights(catalog.graph(model_id, "infer"), catalog.manifest(model_id), params),
        averaged,
    )
