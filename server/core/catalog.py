"""Models and their versions: what is stored, what is downloadable, and a small cache of recent versions."""

from __future__ import annotations

import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fleet_protocol import Bundle, Manifest
from server.core.errors import Gone, NotFound
from server.core.events import ModelAdded
from server.core.ports import ModelRecord, Store, VersionRecord


@dataclass(frozen=True)
class ModelInfo:
    model_id: str
    name: str
    num_params: int
    num_classes: int
    input_shape: tuple[int, ...]
    current_version: int
    active: bool
    status: str
    created_at: float
    has_dp_graph: bool = False  # a dp_train.onnx: DP-SGD tasks are possible


def info_of(record: ModelRecord) -> ModelInfo:
    manifest = Manifest.from_json(record.manifest_json)
    return ModelInfo(
        model_id=record.model_id,
        name=record.name,
        num_params=manifest.num_params,
        num_classes=manifest.num_classes,
        input_shape=manifest.input_shape,
        current_version=record.current_version,
        active=record.active,
        status=record.status,
        created_at=record.created_at,
        has_dp_graph=manifest.has_dp_graph,
    )


class Catalog:
    """Reads and adds models through the store; caches recent parameter versions as immutable bytes.

    The cache is written by the push path (under the coordinator's lock) and read by the API's threads
    and event loop without it, so it has its own small lock: an OrderedDict is not safe to read while
    another thread reorders or evicts."""

    def __init__(self, *, store: Store, clock: Callable[[], float], cache_size: int = 64) -> None:
        self.store = store
        self.clock = clock
        self.cache_size = cache_size
        self._params: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._params_lock = threading.Lock()
        self._manifests: dict[str, Manifest] = {}

    def add(self, bundle: Bundle, *, name: str | None = None, actor: str = "admin") -> ModelInfo:
        """Store a model with version 0 = its initial parameters and make it the active one."""
        name = name or bundle.manifest.name
        model_id = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-")[:40] + "-" + secrets.token_hex(3)
        event = ModelAdded(
            model_id=model_id,
            name=name,
            manifest_json=bundle.manifest.to_json(),
            train_onnx=bundle.train_onnx,
            infer_onnx=bundle.infer_onnx,
            init_params=bundle.init_params.astype("<f4").tobytes(),
            actor=actor,
            at=self.clock(),
            dp_onnx=bundle.dp_onnx,
        )
        self.store.commit([event])
        return info_of(self.record(model_id))

    def list(self) -> list[ModelInfo]:
        return [info_of(r) for r in self.store.models()]

    def record(self, model_id: str) -> ModelRecord:
        record = self.store.model(model_id)
        if record is None:
            raise NotFound(f"no model {model_id!r}")
        return record

    def active(self) -> ModelRecord | None:
        return self.store.active_model()

    def info(self, model_id: str) -> ModelInfo:
        return info_of(self.record(model_id))

    def active_info(self) -> ModelInfo:
        record = self.active()
        if record is None:
            raise NotFound("no model is active")
        return info_of(record)

    def manifest(self, model_id: str) -> Manifest:
        if model_id not in self._manifests:
            self._manifests[model_id] = Manifest.from_json(self.record(model_id).manifest_json)
        return self._manifests[model_id]

    def graph(self, model_id: str, which: str) -> bytes:
        """``train``, ``infer`` or ``dp`` (the DP-SGD graph, dp_train.onnx): the model's ONNX graph."""
        if which not in ("train", "infer", "dp"):
            raise NotFound("graphs are train.onnx, infer.onnx and dp.onnx")
        data = self.store.graph(model_id, which)
        if data is None and which == "dp" and self.store.model(model_id) is not None:
            raise NotFound(f"model {model_id!r} has no DP-SGD graph (dp_train.onnx): no DP tasks on it")
        if data is None:
            raise NotFound(f"no model {model_id!r}")
        return data

    def dp_graph(self, model_id: str) -> bytes | None:
        """The model's DP-SGD graph (per-example clipped sum), None if it has none; NotFound if no model."""
        if not self.manifest(model_id).has_dp_graph:
            return None
        return self.store.graph(model_id, "dp")

    def has_dp_graph(self, model_id: str) -> bool:
        """Whether DP tasks can run on the model (from its manifest: no graph bytes are read)."""
        return self.manifest(model_id).has_dp_graph

    def remember(self, model_id: str, version: int, params: bytes) -> None:
        with self._params_lock:
            self._params[(model_id, version)] = params
            self._params.move_to_end((model_id, version))
            while len(self._params) > self.cache_size:
                self._params.popitem(last=False)

    def cached_params(self, model_id: str, version: int) -> bytes | None:
        """A version's parameters if they are in memory (recent versions are), else None."""
        with self._params_lock:
            return self._params.get((model_id, version))

    def params_bytes(self, model_id: str, version: int) -> bytes:
        """A version's parameters (little-endian float32); Gone once out of the retention window."""
        cached = self.cached_params(model_id, version)
        if cached is not None:
            return cached
        data = self.store.version_params(model_id, version)
        record = self.record(model_id)
        if data is None:
            if 0 <= version <= record.current_version:
                raise Gone(f"version {version} of {model_id} is past the retention window")
            raise NotFound(f"model {model_id} has no version {version}")
        self.remember(model_id, version, data)
        return data

    def params(self, model_id: str, version: int) -> np.ndarray:
        return np.frombuffer(self.params_bytes(model_id, version), dtype="<f4")

    def as_evaluated(self, model_id: str, version: int) -> tuple[np.ndarray, bool]:
        """(parameters, averaged): a version as it was served and scored, the strategy's average when an
        evaluation kept one (migration 0013), else as trained. NotFound, or Gone past retention."""
        kept = self.store.served_params(model_id, version)
        if kept is not None:
            return np.frombuffer(kept, dtype="<f4"), True
        return self.params(model_id, version), False

    def versions(self, model_id: str) -> list[VersionRecord]:
        """The retained versions, oldest first, with their lineage and notes; NotFound for no model."""
        self.record(model_id)
        return self.store.versions(model_id)
