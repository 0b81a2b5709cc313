"""The model manifest and export bundle: what server and device need to run a model without torch.

Part of the wire contract (the manifest is served at ``/v1/models/{id}/manifest``, a bundle is what
``POST /v1/admin/models`` uploads), so it lives here and needs only numpy.

A bundle is a directory (or a zip of it) holding ``manifest.json``, ``train.onnx`` (inputs: every
parameter, ``x`` with a dynamic batch, ``y``; outputs: ``loss`` then one gradient per parameter in
manifest order), ``infer.onnx`` (inputs: every parameter and ``x``; output: ``logits``) and
``init.bin`` (the initial parameters as one flat little-endian float32 buffer). Optionally
``dp_train.onnx``, the DP-SGD graph (inputs: as ``train.onnx`` plus a scalar float32 ``clip``; outputs:
``loss`` then, per parameter, the sum over the batch of each example's gradient clipped to global L2 norm
``clip``); a manifest with ``dp_grad_names`` promises it, one without says the model has none.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

BUNDLE_FILES = ("manifest.json", "train.onnx", "infer.onnx", "init.bin")
DP_GRAPH_FILE = "dp_train.onnx"  # optional: models whose layers allow per-example gradients have it


@dataclass(frozen=True)
class ParamSpec:
    """One parameter tensor's place in the flat float32 buffer."""

    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


@dataclass(frozen=True)
class Manifest:
    """Names, shapes and offsets of a model's parameters, and the graphs' input/output names."""

    name: str
    params: tuple[ParamSpec, ...]
    input_shape: tuple[int, ...]
    num_classes: int
    x_name: str = "x"
    y_name: str = "y"
    loss_name: str = "loss"
    logits_name: str = "logits"
    grad_names: tuple[str, ...] = field(default=())
    dp_grad_names: tuple[str, ...] = field(default=())  # the DP graph's outputs; empty: no DP graph
    clip_name: str = "clip"  # the DP graph's scalar input C
    # the default strategy's step for this model when the settings leave its rate unset (its author's,
    # chosen on half of a workload suite: docs/results/default-search.md); None: the strategy's own
    learning_rate: float | None = None
    # and the longest step it takes, relative to the parameters' norm (Strategy.max_step); None: uncapped
    max_step: float | None = None

    @property
    def has_dp_graph(self) -> bool:
        return bool(self.dp_grad_names)

    @cached_property
    def num_params(self) -> int:
        """Every push checks it: computed once (the dataclass is frozen, so it never changes)."""
        return sum(p.size for p in self.params)

    def split(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Views of ``flat`` shaped as each parameter (no copy)."""
        if flat.shape != (self.num_params,):
            raise ValueError(f"expected {self.num_params} values, got {flat.shape}")
        return {p.name: flat[p.offset : p.offset + p.size].reshape(p.shape) for p in self.params}

    def head(self) -> tuple[slice, slice] | None:
        """Where the output layer's weight (classes × features, row-major) and bias sit in the flat vector:
        the last two parameters, when shaped so; None for a model that ends otherwise."""
        if len(self.params) < 2:
            return None
        weight, bias = self.params[-2:]
        if bias.shape != (self.num_classes,) or len(weight.shape) != 2 or weight.shape[0] != self.num_classes:
            return None
        return slice(weight.offset, weight.offset + weight.size), slice(bias.offset, bias.offset + bias.size)

    def to_json(self) -> str:
        data = asdict(self)
        for p, spec in zip(data["params"], self.params, strict=True):
            p["size"] = spec.size
        data["num_params"] = self.num_params
        return json.dumps(data, indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        data = json.loads(text)
        params = tuple(
            ParamSpec(name=p["name"], shape=tuple(p["shape"]), offset=int(p["offset"]))
            for p in data["params"]
        )
        manifest = cls(
            name=data["name"],
            params=params,
            input_shape=tuple(data["input_shape"]),
            num_classes=int(data["num_classes"]),
            x_name=data.get("x_name", "x"),
            y_name=data.get("y_name", "y"),
            loss_name=data.get("loss_name", "loss"),
            logits_name=data.get("logits_name", "logits"),
            grad_names=tuple(data.get("grad_names", ())),
            dp_grad_names=tuple(data.get("dp_grad_names", ())),
            clip_name=data.get("clip_name", "clip"),
            learning_rate=data.get("learning_rate"),
            max_step=data.get("max_step"),
        )
        manifest.validate()
        return manifest

    def validate(self) -> None:
        """Offsets must tile the flat buffer exactly, in order."""
        offset = 0
        for p in self.params:
            if p.offset != offset or any(d <= 0 for d in p.shape):
                raise ValueError(f"parameter {p.name!r}: bad offset or shape")
            offset += p.size
        if self.num_classes < 2 or not self.input_shape:
            raise ValueError("manifest needs num_classes >= 2 and an input shape")
        if self.learning_rate is not None and not 0 < self.learning_rate <= 100:  # also refuses NaN
            raise ValueError(f"manifest learning_rate must be in (0, 100], got {self.learning_rate}")
        if self.max_step is not None and not 0 < self.max_step <= 10:
            raise ValueError(f"manifest max_step must be in (0, 10], got {self.max_step}")
        if self.grad_names and len(self.grad_names) != len(self.params):
            raise ValueError("one gradient output per parameter")
        if self.dp_grad_names and len(self.dp_grad_names) != len(self.params):
            raise ValueError("one DP gradient output per parameter (or none: no DP graph)")


@dataclass(frozen=True)
class Bundle:
    """An exported model: manifest, both graphs, the initial parameters and, if it has one, the DP graph."""

    manifest: Manifest
    train_onnx: bytes
    infer_onnx: bytes
    init_params: np.ndarray
    dp_onnx: bytes | None = None

    @classmethod
    def load(cls, path: str | Path) -> Bundle:
        """Read a bundle from a directory or a zip file."""
        path = Path(path)
        if path.is_dir():
            names = [*BUNDLE_FILES, *([DP_GRAPH_FILE] if (path / DP_GRAPH_FILE).is_file() else [])]
            files = {name: (path / name).read_bytes() for name in names}
        else:
            files = read_zip(path.read_bytes())
        return cls.from_files(files)

    @classmethod
    def from_files(cls, files: dict[str, bytes]) -> Bundle:
        missing = [n for n in BUNDLE_FILES if n not in files]
        if missing:
            raise ValueError(f"bundle is missing {', '.join(missing)}")
        manifest = Manifest.from_json(files["manifest.json"])
        init = np.frombuffer(files["init.bin"], dtype="<f4").astype(np.float32)
        if init.shape != (manifest.num_params,):
            raise ValueError(f"init.bin holds {init.size} values, manifest says {manifest.num_params}")
        dp_onnx = files.get(DP_GRAPH_FILE)
        if manifest.has_dp_graph != (dp_onnx is not None):
            raise ValueError(
                f"manifest.json names DP gradients but the bundle has no {DP_GRAPH_FILE}"
                if manifest.has_dp_graph
                else f"{DP_GRAPH_FILE} without dp_grad_names in manifest.json"
            )
        return cls(manifest, files["train.onnx"], files["infer.onnx"], init, dp_onnx)

    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in self.files().items():
            (directory / name).write_bytes(data)
        if self.dp_onnx is None:  # a stale DP graph from an earlier export would contradict the manifest
            (directory / DP_GRAPH_FILE).unlink(missing_ok=True)
        return directory

    def files(self) -> dict[str, bytes]:
        files = {
            "manifest.json": self.manifest.to_json().encode(),
            "train.onnx": self.train_onnx,
            "infer.onnx": self.infer_onnx,
            "init.bin": self.init_params.astype("<f4").tobytes(),
        }
        if self.dp_onnx is not None:
            files[DP_GRAPH_FILE] = self.dp_onnx
        return files

    def to_zip(self) -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in self.files().items():
                archive.writestr(name, data)
        return buffer.getvalue()


def read_zip(data: bytes, *, max_bytes: int = 512 * 1024 * 1024) -> dict[str, bytes]:
    """The bundle files of a zip archive.

    Refuses any member but the four bundle files and the optional DP graph at the archive's root (so
    no ``../x``, absolute path or directory), a name given twice, and archives that inflate past
    ``max_bytes``."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ValueError("bundle is not a zip archive") from exc
    with archive:
        infos: dict[str, zipfile.ZipInfo] = {}
        for info in archive.infolist():
            if info.filename not in (*BUNDLE_FILES, DP_GRAPH_FILE):
                known = ", ".join((*BUNDLE_FILES, DP_GRAPH_FILE))
                raise ValueError(f"unexpected zip member {info.filename[:100]!r}: a bundle holds {known}")
            if info.filename in infos:
                raise ValueError(f"zip member {info.filename!r} appears twice")
            infos[info.filename] = info
        if sum(i.file_size for i in infos.values()) > max_bytes:
            raise ValueError("bundle too large")
        try:
            return {name: archive.read(info) for name, info in infos.items()}
        except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError, RuntimeError) as exc:
            raise ValueError(f"unreadable zip member: {exc}") from exc
