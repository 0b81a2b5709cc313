"""*Try the model*: the coordinator's served ``inference.onnx``, kept on the phone and refreshed when a newer
version exists, run locally through the platform's ONNX backend (no drawing leaves the device)."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from client._exceptions import WorkerError
from client._onnx_session import LogitsComputer
from client._transport import ApiClient

__all__ = ["Guess", "ServedModel"]

logger = logging.getLogger("fleet.app")


@dataclass(frozen=True)
class Guess:
    """The model's top classes for one drawing and which model version said so."""

    top: list[tuple[int, float]]  # (class, probability), most likely first
    model_id: str
    version: int


class ServedModel:
    """The newest served model on this device: downloaded once per version, cached in ``folder``.

    ``refresh`` asks the coordinator for the active model's version at most every ``check_every`` s;
    a model that cannot be loaded leaves the previous one in use and says why in ``problem``.
    """

    def __init__(
        self,
        folder: Path,
        inference_factory: Callable[[bytes], LogitsComputer],
        *,
        check_every: float = 30.0,
    ) -> None:
        self.folder = Path(folder) / "models"
        self.inference_factory = inference_factory
        self.check_every = check_every
        self.session: LogitsComputer | None = None
        self.model_id = ""
        self.version = -1
        self.input_shape: tuple[int, ...] = (1, 28, 28)
        self.problem = ""
        self._checked = 0.0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ServedModel(model_id={self.model_id!r}, version={self.version})"

    def refresh(self, api: ApiClient, *, force: bool = False) -> bool:
        """Fetch a newer version if there is one; True when the model in use changed. Never raises."""
        if not force and time.monotonic() - self._checked < self.check_every and self.session is not None:
            return False
        self._checked = time.monotonic()
        try:
            info = api.active_model()
            model_id, version = str(info["model_id"]), int(info["current_version"])
            shape = tuple(int(d) for d in info["input_shape"])
        except WorkerError as exc:
            self.problem = f"cannot check for a newer model: {exc.detail}"
            return False
        except (KeyError, TypeError, ValueError) as exc:
            self.problem = f"the coordinator's model description is malformed: {exc!r}"
            return False
        if (model_id, version) == (self.model_id, self.version) and self.session is not None:
            self.problem = ""
            return False
        try:
            data = self._bytes(api, model_id, version)
            session = self.inference_factory(data)
        except WorkerError as exc:
            self.problem = f"cannot download model v{version}: {exc.detail}"
            return False
        except Exception as exc:  # onnxruntime refusing the graph: keep the one in use
            self.problem = f"this device cannot load model v{version}: {exc}"
            (self.folder / f"{model_id}-v{version}.onnx").unlink(missing_ok=True)
            return False
        with self._lock:
            self.session, self.model_id, self.version, self.input_shape = session, model_id, version, shape
        self.problem = ""
        logger.info("try-the-model uses %s v%d", model_id, version)
        return True

    def classify(self, image: np.ndarray, top: int = 3) -> Guess | None:
        """Top-``top`` classes with softmax probabilities (None before any model was loaded)."""
        with self._lock:
            session, model_id, version, shape = self.session, self.model_id, self.version, self.input_shape
        if session is None:
            return None
        logits = np.asarray(session.logits(np.asarray(image, np.float32).reshape((1, *shape))))[0]
        exp = np.exp(logits - logits.max())
        probs = exp / exp.sum()
        order = np.argsort(-probs)[:top]
        return Guess([(int(i), float(probs[i])) for i in order], model_id, version)

    def _bytes(self, api: ApiClient, model_id: str, version: int) -> bytes:
        path = self.folder / f"{model_id}-v{version}.onnx"
        if path.exists():
            return path.read_bytes()
        data = api.inference_model(model_id, version)
        self.folder.mkdir(parents=True, exist_ok=True)
        for old in self.folder.glob(f"{model_id}-v*.onnx"):
            old.unlink(missing_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.folder, suffix=".part")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
        return data
