"""Test accuracy of a parameter vector, with the model's ONNX inference graph (no torch)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from fleet_protocol import Manifest


class Evaluator:
    """Runs the inference graph over a held-out set; one instance per model."""

    def __init__(
        self,
        manifest: Manifest,
        infer_onnx: bytes,
        x: np.ndarray,
        y: np.ndarray,
        *,
        threads: int = 1,
        batch_size: int = 500,
    ) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.manifest = manifest
        self.session = ort.InferenceSession(infer_onnx, options, providers=["CPUExecutionProvider"])
        self.x = np.ascontiguousarray(x, dtype=np.float32).reshape((-1, *manifest.input_shape))
        self.y = np.asarray(y, dtype=np.int64)
        self.batch_size = batch_size

    def logits(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        feeds: dict[str, np.ndarray] = dict(self.manifest.split(params))
        feeds[self.manifest.x_name] = x
        return self.session.run([self.manifest.logits_name], feeds)[0]

    def evaluate(self, params: np.ndarray) -> tuple[float, float]:
        """(accuracy, mean cross-entropy) on the held-out set."""
        correct, loss = 0, 0.0
        for start in range(0, len(self.y), self.batch_size):
            x, y = self.x[start : start + self.batch_size], self.y[start : start + self.batch_size]
            z = self.logits(params, x).astype(np.float64)
            z -= z.max(axis=1, keepdims=True)
            log_probs = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            loss -= float(log_probs[np.arange(len(y)), y].sum())
            correct += int((z.argmax(axis=1) == y).sum())
        n = max(1, len(self.y))
        return correct / n, loss / n

    def per_class_recall(self, params: np.ndarray) -> np.ndarray:
        """Recall of each class (the long-tail experiments plot class 0's)."""
        predictions = np.concatenate(
            [
                self.logits(params, self.x[s : s + self.batch_size]).argmax(axis=1)
                for s in range(0, len(self.y), self.batch_size)
            ]
        )
        classes = self.manifest.num_classes
        hits = np.bincount(self.y[predictions == self.y], minlength=classes)
        totals = np.maximum(1, np.bincount(self.y, minlength=classes))
        return hits / totals
