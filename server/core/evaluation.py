"""Test accuracy (or F1@top-k) of a parameter vector, with the model's ONNX inference graph (no torch).

The metric is ``accuracy`` (top-1) or ``f1@k``: a recommender is judged on its top k (sim/streams/
metrics.py; with one relevant item per example a hit in the top k scores 2 / (k + 1), a miss 0). Either
way the coordinator records it as the version's "accuracy"; the console labels it (FLEET_EVAL_LABEL).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from fleet_protocol import Manifest


def metric_k(metric: str) -> int:
    """How many of the top scores count: 1 for ``accuracy``, k for ``f1@k`` (anything else: ValueError)."""
    if metric == "accuracy":
        return 1
    name, _, k = metric.partition("@")
    if name != "f1" or not k.isdigit() or int(k) < 1:
        raise ValueError(f"unknown evaluation metric {metric!r}: 'accuracy' or 'f1@k' (e.g. f1@5)")
    return int(k)


def _rank(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each label's rank among its row's scores (0: the top); ties go to the lower index, as argmax's."""
    label = z[np.arange(len(y)), y][:, None]
    index = np.arange(z.shape[1])[None, :]
    return ((z > label) | ((z == label) & (index < y[:, None]))).sum(axis=1)


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
        metric: str = "accuracy",
    ) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.manifest = manifest
        self.session = ort.InferenceSession(infer_onnx, options, providers=["CPUExecutionProvider"])
        self.batch_size = batch_size
        self.k = metric_k(metric)
        self.f1 = metric != "accuracy"
        self.use(x, y)

    def use(self, x: np.ndarray, y: np.ndarray) -> None:
        """Evaluate on ``(x, y)`` from now on: a moving held-out set (server/core/eval_file.py)."""
        x = np.ascontiguousarray(x, dtype=np.float32).reshape((-1, *self.manifest.input_shape))
        self.data = (x, np.asarray(y, dtype=np.int64))  # one assignment: a reader never sees a mix

    @property
    def x(self) -> np.ndarray:
        return self.data[0]

    @property
    def y(self) -> np.ndarray:
        return self.data[1]

    def logits(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        feeds: dict[str, np.ndarray] = dict(self.manifest.split(params))
        feeds[self.manifest.x_name] = x
        return self.session.run([self.manifest.logits_name], feeds)[0]

    def evaluate(self, params: np.ndarray) -> tuple[float, float]:
        """(accuracy or F1@k, mean cross-entropy) on the held-out set."""
        x_all, y_all = self.data
        correct, loss = 0, 0.0
        for start in range(0, len(y_all), self.batch_size):
            x, y = x_all[start : start + self.batch_size], y_all[start : start + self.batch_size]
            z = self.logits(params, x).astype(np.float64)
            z -= z.max(axis=1, keepdims=True)
            log_probs = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
            loss -= float(log_probs[np.arange(len(y)), y].sum())
            correct += int((_rank(z, y) < self.k).sum())
        n = max(1, len(y_all))
        hit_rate = correct / n
        return (hit_rate * 2 / (self.k + 1) if self.f1 else hit_rate), loss / n

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
