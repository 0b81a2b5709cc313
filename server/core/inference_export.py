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


def served_params(
    catalog: Catalog, model_id: str, version: int | None = None, served: Snapshot | None = None
) -> tuple[int, np.ndarray, bool]:
    """(version, parameters, averaged): the model served at ``version`` (default: the head). At the
    coordinator's snapshot ``served`` that is its parameters (the strategy's average when it keeps one);
    an evaluated version kept the average it was scored as; any other version is served as trained.
    NotFound for an unknown model or version, Gone past retention."""
    version = catalog.record(model_id).current_version if version is None else version
    if served is not None and (served.model_id, served.version) == (model_id, version):
        return version, served.params, served.averaged
    return (version, *catalog.as_evaluated(model_id, version))


def export_inference(
    catalog: Catalog, model_id: str, version: int | None = None, served: Snapshot | None = None
) -> tuple[int, bytes, bool]:
    """(version, ONNX bytes, averaged): the inference graph with the parameters served at that version
    (``served_params``) inside."""
    version, params, averaged = served_params(catalog, model_id, version, served)
    return (
        version,
        bake_weights(catalog.graph(model_id, "infer"), catalog.manifest(model_id), params),
        averaged,
    )
