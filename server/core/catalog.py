"""Models and their versions: what is stored, what is downloadable, and a small cache of recent versions."""

from __future__ import annotations

import re
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from models.manifest import Bundle, Manifest
from server.core.errors import Gone, NotFound
from server.store import repository as repo
from server.store.tables import ModelRow


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


def info_of(row: ModelRow) -> ModelInfo:
    manifest = Manifest.from_json(row.manifest)
    return ModelInfo(
        model_id=row.id,
        name=row.name,
        num_params=manifest.num_params,
        num_classes=manifest.num_classes,
        input_shape=manifest.input_shape,
        current_version=row.current_version,
        active=row.active,
        status=row.status,
        created_at=row.created_at,
    )


class Catalog:
    """Reads and writes models; caches recently used parameter versions as immutable bytes."""

    def __init__(
        self, *, sessions: sessionmaker[Session], clock: Callable[[], float], cache_size: int = 64
    ) -> None:
        self.sessions = sessions
        self.clock = clock
        self.cache_size = cache_size
        self._params: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._manifests: dict[str, Manifest] = {}

    def add(self, bundle: Bundle, *, name: str | None = None, actor: str = "admin") -> ModelInfo:
        """Store a model with version 0 = its initial parameters and make it the active one."""
        name = name or bundle.manifest.name
        model_id = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-")[:40] + "-" + secrets.token_hex(3)
        now = self.clock()
        row = ModelRow(
            id=model_id,
            name=name,
            manifest=bundle.manifest.to_json(),
            train_onnx=bundle.train_onnx,
            infer_onnx=bundle.infer_onnx,
            created_at=now,
            active=True,
            current_version=0,
            status="training",
        )
        with self.sessions.begin() as session:
            repo.add_model(session=session, row=row, init_params=bundle.init_params.astype("<f4").tobytes())
            repo.audit(
                session=session, actor=actor, action="add_model", detail={"model_id": model_id}, now=now
            )
        return info_of(row)

    def list(self) -> list[ModelInfo]:
        with self.sessions() as session:
            return [info_of(r) for r in repo.list_models(session=session)]

    def row(self, model_id: str) -> ModelRow:
        with self.sessions() as session:
            row = repo.get_model(session=session, model_id=model_id)
        if row is None:
            raise NotFound(f"no model {model_id!r}")
        return row

    def active_row(self) -> ModelRow | None:
        with self.sessions() as session:
            return repo.active_model(session=session)

    def manifest(self, model_id: str) -> Manifest:
        if model_id not in self._manifests:
            self._manifests[model_id] = Manifest.from_json(self.row(model_id).manifest)
        return self._manifests[model_id]

    def remember(self, model_id: str, version: int, params: bytes) -> None:
        self._params[(model_id, version)] = params
        self._params.move_to_end((model_id, version))
        while len(self._params) > self.cache_size:
            self._params.popitem(last=False)

    def cached_params(self, model_id: str, version: int) -> bytes | None:
        """A version's parameters if they are in memory (recent versions are), else None."""
        return self._params.get((model_id, version))

    def params_bytes(self, model_id: str, version: int) -> bytes:
        """A version's parameters (little-endian float32); Gone once out of the retention window."""
        cached = self._params.get((model_id, version))
        if cached is not None:
            return cached
        with self.sessions() as session:
            data = repo.get_version(session=session, model_id=model_id, version=version)
            row = repo.get_model(session=session, model_id=model_id)
        if row is None:
            raise NotFound(f"no model {model_id!r}")
        if data is None:
            if 0 <= version <= row.current_version:
                raise Gone(f"version {version} of {model_id} is past the retention window")
            raise NotFound(f"model {model_id} has no version {version}")
        self.remember(model_id, version, data)
        return data

    def params(self, model_id: str, version: int) -> np.ndarray:
        return np.frombuffer(self.params_bytes(model_id, version), dtype="<f4")

    def versions(self, model_id: str) -> list[tuple[int, float]]:
        self.row(model_id)
        with self.sessions() as session:
            return repo.list_versions(session=session, model_id=model_id)
